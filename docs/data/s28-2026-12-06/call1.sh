#!/usr/bin/env bash
# Session 28, GPU call 1: what session 27 left unmeasured for `_ws` (the default Hopper prefill):
# every CUDA parity module (the new cuda_prefill_<ws|plain|tma|mma> ones for the first time on a
# GPU), compute-sanitizer memcheck over `_ws`'s hd128 cases, the PyTorch anchor, and #11's rows:
# 4K dense and sparse, 32K dense (profiled: where the non-attention time goes), 32K with half the
# heads streaming, and 32K with block-sparse prefill too (two budgets, as in session 25).
BINS=.gpu/s28a/bins.tgz LIMIT=${LIMIT:-520}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P cpar 300 cuda
E memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" cuda_prefill_ws::prefill_attention::kv_bf16_hd128 --test-threads 1
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
S="--contexts 4k --repeats 1 --prefill 32768"
C ws_32k $S --sparse off --profile
C ws_32k_2 $S --sparse off
C ws_32k_sp $S --sparse on
C ws_32k_bs2k $S --sparse on --prefill-budget 2048 --prefill-dense-below 4096
C ws_32k_bs4k $S --sparse on --prefill-budget 4096 --prefill-dense-below 8192
C ws_4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
