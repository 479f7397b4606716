#!/usr/bin/env bash
# Session 28, GPU call 4: the Hopper prefill's row maxima and sums as four independent chains a
# row (call 2's profile of `_ws`: the serial max chain 15.5% of the computing warps' samples),
# against the same tree without it (lserve_base) in the same call; parity of every Hopper variant
# and memcheck of `_ws`, the PyTorch anchor, and #11's rows.
BINS=.gpu/s28d/bins.tgz LIMIT=${LIMIT:-420}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 240 cuda::prefill_attention cuda_prefill_ws cuda_prefill_tma cuda_prefill_plain
E memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" cuda_prefill_ws::prefill_attention::kv_bf16_hd128 --test-threads 1
S="--contexts 4k --repeats 1 --prefill 32768"
C new_32k $S --sparse off --profile
LSERVE_BIN=$B/lserve_base C base_32k $S --sparse off --profile
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; pack; }
C new_32k_2 $S --sparse off
LSERVE_BIN=$B/lserve_base C base_32k_2 $S --sparse off
C new_32k_3 $S --sparse off
LSERVE_BIN=$B/lserve_base C base_32k_3 $S --sparse off
C new_32k_sp $S --sparse on
LSERVE_BIN=$B/lserve_base C base_32k_sp $S --sparse on
C new_32k_bs2k $S --sparse on --prefill-budget 2048 --prefill-dense-below 4096
C new_4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
