#!/usr/bin/env bash
# Session 17, GPU call 1: the CUDA row-norm parity of 167d6fe (rn4_in, never run on a GPU), then
# issue #14's measurement: Nsight Compute on one decode layer's quantized GEMVs (Q4_K, then int8
# and Q8_0), and the --profile of the Q4_K 32K sparse batch-1 step (x quantization apart).
BINS=.gpu/s17a/bins.tgz LIMIT=${LIMIT:-540}
. scripts/gpu_call_lib.sh
LSERVE_REQUIRE_CUDA=1 P c_norms 240 cuda::rmsnorm cuda::add_rmsnorm cuda::head_rmsnorm
S() { C "$@" --batch 1 --contexts 32k --sparse on --token-budget 4096; }
S q4k_prof --dtype q4_k --repeats 5 --profile
S q4k --dtype q4_k --repeats 10
t0=$(date +%s); OUT=$OUT LSERVE=$B/lserve DTYPE=q4_k NCU_TIMEOUT=200 bash scripts/ncu_decode_gemv.sh > $OUT/ncu_q4k_sum.txt 2>&1
step_end ncu_q4k $? $t0; head -80 $OUT/ncu_q4k_sum.txt | tee -a $L; pack
left && { t0=$(date +%s); OUT=$OUT LSERVE=$B/lserve DTYPE=q8_0 LAUNCH_SKIP=129 LAUNCHES=4 NCU_TIMEOUT=150 bash scripts/ncu_decode_gemv.sh > $OUT/ncu_q80_sum.txt 2>&1
step_end ncu_q80 $? $t0; head -60 $OUT/ncu_q80_sum.txt | tee -a $L; pack; }
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
