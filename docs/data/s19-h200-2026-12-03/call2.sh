#!/usr/bin/env bash
# Session 19, GPU call 2: Q4_0 and Q5_0 packed as well (src/backend/cuda/packed.rs: each field of 8
# GGML blocks together, 16-byte aligned), their register GEMV (a lane per block), and a
# measurement: the int8-code register GEMVs with 32 elements a thread (LSERVE_CUDA_MMV_WIDE=1).
BINS=.gpu/s19b/bins.tgz LIMIT=${LIMIT:-545}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
F=()
for m in cuda cuda_mmv_inblock cuda_mmv_pre cuda_mmv_pre_loop cuda_mmv_reg cuda_mmv_reg_loop cuda_mmv_regf cuda_mmv_regf_loop; do
  for w in w_q4_0 w_q5_0 w_q8_0; do F+=("$m::matmul::$w"); done
done
P par 300 "${F[@]}" cuda::embed::w_q4_0 cuda::embed::w_q5_0 cuda::embed::w_q8_0
E e2e 150 $B/cuda_e2e quantized_weights
E warm 200 $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype bf16 --batch 1 --contexts 4k --repeats 1
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
LSERVE_CUDA_PACK=0 C q4_0_off1 --dtype q4_0 $S
C q4_0_on1 --dtype q4_0 $S
LSERVE_CUDA_PACK=0 C q5_0_off1 --dtype q5_0 $S
C q5_0_on1 --dtype q5_0 $S
LSERVE_CUDA_PACK=0 C q4_0_off2 --dtype q4_0 $S
C q4_0_on2 --dtype q4_0 $S
LSERVE_CUDA_MMV_WIDE=1 P wide 150 cuda::matmul::w_int8 cuda::matmul::w_q8_0 cuda_mmv_reg::matmul::w_int8 \
  cuda_mmv_reg::matmul::w_q8_0 cuda_mmv_reg_loop::matmul::w_int8 cuda_mmv_reg_loop::matmul::w_q8_0
C q8_1 --dtype q8_0 $S
LSERVE_CUDA_MMV_WIDE=1 C q8_wide1 --dtype q8_0 $S
C i8_1 --dtype int8 $S
LSERVE_CUDA_MMV_WIDE=1 C i8_wide1 --dtype int8 $S
C q8_2 --dtype q8_0 $S
LSERVE_CUDA_MMV_WIDE=1 C q8_wide2 --dtype q8_0 $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
