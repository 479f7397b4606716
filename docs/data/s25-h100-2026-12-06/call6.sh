#!/usr/bin/env bash
# Session 25, GPU call 6 — NOT RUN (the session's device time ran out; built with
# quantized-prefill-f16-x-not-run-on-a-gpu.patch applied): #14's quantized prefill. The new code: on CUDA's dequantize + f16 GEMM
# path (m > 64) quantized matrices take their x in f16 from the norms and silu_mul
# (`Backend::weight_x16_dtype`), so `matmul_round_x_f16` goes and those activations are 16-bit;
# and the f16 scratch's size is a knob (LSERVE_CUDA_DEQUANT_MB, default 64: a chunk of weight rows
# per cuBLAS GEMM). Parity of every quantized matmul (with the f16-x runs), cuda_e2e (with the new
# 256-token-step quantized prefill test), then Q4_K prefill at 4K / 32K: before (lserve_prev =
# call 1's binary) vs new at 64 / 256 / 1024 MiB, profiled at 32K, bf16 beside it.
BINS=.gpu/s25c/bins.tgz LIMIT=${LIMIT:-250} # lserve, lserve_prev, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::matmul::w_q cuda::matmul::w_int8 cuda::matmul::w_fp8 cuda::silu_mul cuda::add_rmsnorm
E e2e 120 $B/cuda_e2e quantized
PREV() { LSERVE_BIN=$B/lserve_prev C "$@"; }
S4="--dtype q4_k --contexts 4k --repeats 2 --prefill 4096 --sparse off"
S32="--dtype q4_k --contexts 4k --repeats 1 --prefill 32768 --sparse off"
PREV prev_4k $S4
C new_4k $S4
PREV prev_32k $S32 --profile
C new_32k $S32 --profile
LSERVE_CUDA_DEQUANT_MB=256 C new_32k_256 $S32 --profile
C new_4k_2 $S4
LSERVE_CUDA_DEQUANT_MB=256 C new_4k_256 $S4
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
