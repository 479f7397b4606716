#!/usr/bin/env bash
# Session 40, GPU call 1: the batch-1 decode step's norms and silu_mul folded into the GEMVs after
# them (Backend::matmul_prologue: the lanes make x from the residual / gate|up in their loads) and
# o_proj / down adding into the residual in their stores (accumulate at one row). Parity first
# (every weight format's matmul with the prologue cases, the register GEMVs' loop variants), the
# CUDA end-to-end greedy tests, then 8B 32K sparse batch-1 steps with it and without it
# (LSERVE_CUDA_FUSE_DECODE=0, same binary) alternated, Q4_K / int8 / bf16, the session's start
# (s39e: 6efff0c) beside them, a Q4_K profile, and wgpu's rope_append_kv (the kv_fp8 zero codes,
# session 39's fix, not yet run on NVIDIA).
BINS=.gpu/s40a/bins.tgz LIMIT=${LIMIT:-520} # lserve, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
OLD=/root/s39e; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s39e/bins.tgz -C $OLD
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
P par 240 cuda::matmul cuda_mmv_regf_loop::matmul cuda_mmv_bulk_loop::matmul --test-threads 1
E e2e 150 $B/cuda_e2e --test-threads 1
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
for r in 1 2; do
  C q4k_new$r --dtype q4_k $S
  LSERVE_CUDA_FUSE_DECODE=0 C q4k_off$r --dtype q4_k $S
done
C i8_new --dtype int8 $S
LSERVE_CUDA_FUSE_DECODE=0 C i8_off --dtype int8 $S
C bf16_new $S
LSERVE_CUDA_FUSE_DECODE=0 C bf16_off $S
LSERVE_BIN=$OLD/lserve C q4k_old --dtype q4_k $S
C q4k_new3 --dtype q4_k $S
LSERVE_BIN=$OLD/lserve C i8_old --dtype int8 $S
LSERVE_BIN=$OLD/lserve C bf16_old $S
C q4k_prof --dtype q4_k $S --profile
export LSERVE_REQUIRE_WGPU=1
E wgpu 120 $B/backend_parity wgpu::rope_append_kv --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
