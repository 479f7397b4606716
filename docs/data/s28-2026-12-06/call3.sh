#!/usr/bin/env bash
# Session 28, GPU call 3: call 2's 16-bit GEMM outputs with cuBLAS's reduced-precision split-K
# reduction turned off (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: call 2's matmul parity
# found bf16 / f16 outputs 9 / 2 units off), rope_append_kv with four heads a block, and the page
# summary pass with a block per token (every head) instead of per (token, head). Every CUDA
# parity module, the CUDA end-to-end tests, memcheck over the changed ops, then #11's rows beside
# call 2's binary (lserve_prev) and the PyTorch anchor.
BINS=.gpu/s28c/bins.tgz LIMIT=${LIMIT:-500}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P cpar 300 cuda
E e2e 200 $B/cuda_e2e
E memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" cuda::rope_append_kv cuda::silu_mul cuda::matmul::w_bf16 --test-threads 1
S="--contexts 4k --repeats 1 --prefill 32768"
C new_32k $S --sparse off --profile
LSERVE_BIN=$B/lserve_prev C prev_32k $S --sparse off
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; pack; }
C new_32k_2 $S --sparse off
LSERVE_BIN=$B/lserve_prev C prev_32k_2 $S --sparse off
C new_32k_sp $S --sparse on
C new_32k_bs2k $S --sparse on --prefill-budget 2048 --prefill-dense-below 4096
C new_4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
C new_4k_q4k --dtype q4_k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C new_4k_kv8 --kv-dtype int8 --contexts 4k --repeats 2 --prefill 4096 --sparse off --profile
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
