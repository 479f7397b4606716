#!/usr/bin/env bash
# Session 34, GPU call 2: antidiagonal_score with the parallel finalize (every thread of the CTA
# reduces rows by shuffles; pass 1's page sums through per-key-group column sums) against call 1's
# serial one: its CUDA parity, the wgpu tests that did not finish in call 1 (the process died with
# a segmentation fault while they ran) one at a time, the 32K and 128K block-sparse rows with both
# estimates, and PyTorch at 128K as one chunk (call 1's default 32K chunks are not the anchor).
BINS=.gpu/s34b/bins.tgz LIMIT=${LIMIT:-470} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1 LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 150 cuda::antidiagonal_score
PF="--contexts 4k --repeats 1 --prefill 32768"
BS="--sparse on --prefill-budget 2048 --prefill-dense-below 4096"
C ad_prof $PF $BS --profile
C ad $PF $BS
C mb $PF $BS --prefill-estimate mean_bound
P128="--contexts 4k --repeats 1 --prefill 131072 --sparse on --prefill-budget 4096 --prefill-dense-below 32768"
C ad128 $P128
C mb128 $P128 --prefill-estimate mean_bound
left && { timeout ${TT:-150} python3 scripts/torch_prefill_bench.py --lengths 131072 --chunk 131072 --repeats 1 > $OUT/torch128.txt 2>&1; echo "== torch128 rc $?" | tee -a $L; tail -3 $OUT/torch128.txt | tee -a $L; pack; }
P ptk 40 wgpu::page_top_k --test-threads 1 --nocapture
P ptk_plain 40 wgpu_plain::page_top_k --test-threads 1 --nocapture
P ad_i8 60 wgpu::antidiagonal_score::kv_int8_hd64 --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
