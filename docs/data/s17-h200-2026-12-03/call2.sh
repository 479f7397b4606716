#!/usr/bin/env bash
# Session 17, GPU call 2: the batch-1 GEMV with x in registers (LSERVE_CUDA_MMV=reg: Q4_K, Q5_K,
# int8 rows). Parity of every m == 1 mode, then the Llama-3-8B 32K sparse batch-1 step: auto
# (main's default: x quantized once, copied to shared memory) against reg at its default grid,
# reg:4 and reg:16 blocks per SM at most, alternated; then Nsight Compute on reg's Q4_K layer.
BINS=.gpu/s17b/bins.tgz LIMIT=${LIMIT:-520}
. scripts/gpu_call_lib.sh
LSERVE_REQUIRE_CUDA=1 P c_mmv 240 cuda_mmv_reg cuda_mmv_reg_loop cuda::matmul
grep -q "test result: ok" $OUT/c_mmv.txt || { echo "parity failed" | tee -a $L; exit 0; }
S() { C "$@" --batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  S q4k_auto_$r --dtype q4_k
  LSERVE_CUDA_MMV=reg S q4k_reg_$r --dtype q4_k
  LSERVE_CUDA_MMV=reg:4 S q4k_reg4_$r --dtype q4_k
  LSERVE_CUDA_MMV=reg:16 S q4k_reg16_$r --dtype q4_k
done
for d in int8 q5_k; do
  S ${d}_auto --dtype $d; LSERVE_CUDA_MMV=reg S ${d}_reg --dtype $d
done
left && { t0=$(date +%s); LSERVE_CUDA_MMV=reg OUT=$OUT LSERVE=$B/lserve DTYPE=q4_k NCU_TIMEOUT=120 bash scripts/ncu_decode_gemv.sh > $OUT/ncu_reg_sum.txt 2>&1
step_end ncu_reg $? $t0; head -80 $OUT/ncu_reg_sum.txt | tee -a $L; pack; }
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
