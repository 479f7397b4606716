#!/usr/bin/env bash
# Session 26, GPU call 1: #14's quantized prefill (the dequantize + f16 cuBLAS path at m > 64).
# New: quantized matrices take x in f16 from the norms and silu_mul (`Backend::weight_x16_dtype`,
# no `matmul_round_x_f16`); `matmul_dequant` stages a span of 256 decode chunks in shared memory and
# stores it coalesced; chunks are whole 128-row tiles. Parity of every quantized matmul (also in
# 128-row chunks: `cuda_dequant_chunks`), the two GPU tests written in session 25 and never run
# (cuda_e2e's 256-token-step quantized prefill, tests/gemma3.rs on CUDA), then prefill at 4K / 32K:
# before (lserve_prev = session 25 call 1's binary) vs new at scratch 64 / 256 MiB, bf16 beside.
BINS=.gpu/s26/bins.tgz LIMIT=${LIMIT:-540} # lserve, lserve_prev, backend_parity, cuda_e2e, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 240 cuda::matmul::w_q cuda::matmul::w_int8 cuda::matmul::w_fp8 cuda::silu_mul cuda::add_rmsnorm cuda::rmsnorm cuda_dequant_chunks
E e2e 150 $B/cuda_e2e
E gemma 60 $B/gemma3 cuda
PREV() { LSERVE_BIN=$B/lserve_prev C "$@"; }
S4="--contexts 4k --repeats 2 --prefill 4096 --sparse off"
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
C bf16_4k --dtype bf16 $S4
PREV prev_q4k_4k --dtype q4_k $S4
C new_q4k_4k --dtype q4_k $S4
LSERVE_CUDA_DEQUANT_MB=256 C new_q4k_4k_256 --dtype q4_k $S4
PREV prev_q8_4k --dtype q8_0 $S4
C new_q8_4k --dtype q8_0 $S4
LSERVE_CUDA_DEQUANT_MB=256 C new_q8_4k_256 --dtype q8_0 $S4
C new_q4km_4k --dtype q4_k_m $S4
LSERVE_CUDA_DEQUANT_MB=256 C new_q4km_4k_256 --dtype q4_k_m $S4
C bf16_32k --dtype bf16 $S32 --profile
PREV prev_q4k_32k --dtype q4_k $S32 --profile
C new_q4k_32k --dtype q4_k $S32 --profile
LSERVE_CUDA_DEQUANT_MB=256 C new_q4k_32k_256 --dtype q4_k $S32 --profile
C bf16_4k_2 --dtype bf16 $S4
C new_q4k_4k_2 --dtype q4_k $S4
LSERVE_CUDA_DEQUANT_MB=256 C new_q4k_4k_256_2 --dtype q4_k $S4
LSERVE_CUDA_DEQUANT_MB=256 C new_q4k_4k_256_prof --dtype q4_k $S4 --profile
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
# #14's memory target (8B Q4_K_M, 8K context, wgpu): nvidia-smi memory.used polled every 0.1 s,
# the device's own figure beside it (`device memory (allocator blocks)`). prev: session 25's
# binary (wgpu MemoryHints::Performance, 1,000 warm-up steps of KV reserved); new: MemoryUsage;
# new with --warmup 3 --warmup-ms 0 (the KV of 8,192 + 5 tokens, the context the target names).
MEM() { local name=$1 bin=$2; shift 2; left || return
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.1; done ) > $OUT/mem_$name.txt 2>&1 & local MP=$!
  timeout 150 $bin bench --device wgpu --dtype q4_k_m --shape llama3-8b --contexts 8k --batch 1 --sparse off \
    --head argmax --repeats 2 "$@" > $OUT/memb_$name.txt 2>&1; echo "== mem $name rc $?" | tee -a $L
  kill $MP; grep -E "^ *wgpu|rror|device memory" $OUT/memb_$name.txt | tee -a $L
  echo "memory.used MiB ($name): max $(sort -n $OUT/mem_$name.txt | tail -1)" | tee -a $L; pack; }
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tee -a $L
MEM prev_f16 $B/lserve_prev --kv-dtype f16
MEM new_f16 $B/lserve --kv-dtype f16
MEM new_f16_w3 $B/lserve --kv-dtype f16 --warmup 3 --warmup-ms 0
MEM new_int8_w3 $B/lserve --kv-dtype int8 --warmup 3 --warmup-ms 0
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
