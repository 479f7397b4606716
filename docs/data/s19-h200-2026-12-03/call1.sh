#!/usr/bin/env bash
# Session 19, GPU call 1: Q8_0 stored packed (src/backend/cuda/packed.rs: 8 GGML blocks of a row as
# one 272-byte super-block, scales then 16-byte-aligned codes). Parity of every Q8_0 kernel (the
# batch-1 GEMV in every mode, the MMQ GEMM, the dequantize + GEMM path, embed) and of int8 rows
# (whose register kernel is now shared), the quantized e2e (Q8_0 added), then the 8B step with
# packing on and off (LSERVE_CUDA_Q8_0_PACK=0), same binary, alternated.
BINS=.gpu/s19a/bins.tgz LIMIT=${LIMIT:-540}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
P q8par 240 cuda::matmul::w_q8_0 cuda::matmul::w_int8 cuda::embed::w_q8_0 cuda_mmv_inblock::matmul::w_q8_0 \
  cuda_mmv_pre::matmul::w_q8_0 cuda_mmv_pre_loop::matmul::w_q8_0 cuda_mmv_reg::matmul::w_q8_0 \
  cuda_mmv_reg_loop::matmul::w_q8_0 cuda_mmv_regf::matmul::w_q8_0 cuda_mmv_regf_loop::matmul::w_q8_0 \
  cuda_mmv_reg::matmul::w_int8 cuda_mmv_regf::matmul::w_int8
E e2e 150 $B/cuda_e2e quantized_weights
# The first lserve process compiles the kernels into the cache (~100 s): not inside a 120 s bench step.
E warm 200 $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype bf16 --batch 1 --contexts 4k --repeats 1
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
LSERVE_CUDA_Q8_0_PACK=0 C q8_off1 --dtype q8_0 $S
C q8_on1 --dtype q8_0 $S
LSERVE_CUDA_Q8_0_PACK=0 C q8_off2 --dtype q8_0 $S
C q8_on2 --dtype q8_0 $S
C int8 --dtype int8 $S
C q8_on_128k --dtype q8_0 --batch 1 --contexts 128k --sparse on --token-budget 4096 --repeats 10
LSERVE_CUDA_Q8_0_PACK=0 C q8_off_b8 --dtype q8_0 --batch 8 --contexts 32k --sparse on --token-budget 4096 --repeats 10
C q8_on_b8 --dtype q8_0 --batch 8 --contexts 32k --sparse on --token-budget 4096 --repeats 10
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
