#!/usr/bin/env bash
# Session 17, GPU call 3: the x-in-registers GEMV with x quantized by its own lanes
# (LSERVE_CUDA_MMV=regf: no matmul_quantize_x_m1 launch) against reg (call 2) and auto (main's
# default), Llama-3-8B 32K sparse batch 1, Q4_K / int8 / Q5_K, alternated twice; parity of the
# four register modes first; Nsight Compute on regf's Q4_K layer last.
BINS=.gpu/s17c/bins.tgz LIMIT=${LIMIT:-540}
. scripts/gpu_call_lib.sh
LSERVE_REQUIRE_CUDA=1 P c_mmv 260 cuda_mmv_reg cuda_mmv_regf cuda::matmul::w_q4_k cuda::matmul::w_int8
grep -q "test result: ok" $OUT/c_mmv.txt || { echo "parity failed" | tee -a $L; exit 0; }
S() { C "$@" --batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  for d in q4_k int8 q5_k; do
    S ${d}_auto_$r --dtype $d
    LSERVE_CUDA_MMV=reg S ${d}_reg_$r --dtype $d
    LSERVE_CUDA_MMV=regf S ${d}_regf_$r --dtype $d
  done
done
LSERVE_REQUIRE_CUDA=1 P c_mmv_loop 120 cuda_mmv_reg_loop cuda_mmv_regf_loop
left && { t0=$(date +%s); LSERVE_CUDA_MMV=regf OUT=$OUT LSERVE=$B/lserve DTYPE=q4_k LAUNCH_SKIP=129 LAUNCHES=4 NCU_TIMEOUT=100 bash scripts/ncu_decode_gemv.sh > $OUT/ncu_regf_sum.txt 2>&1
step_end ncu_regf $? $t0; head -40 $OUT/ncu_regf_sum.txt | tee -a $L; pack; }
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
