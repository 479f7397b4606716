#!/usr/bin/env bash
# Session 41, GPU call 1. (1) wgpu: a batch-1 step's o_proj and down add into the residual stream
# in their GEMVs' stores (Backend::matmul_accumulates at one row), so each add_rmsnorm_x8 (one
# workgroup, four rounds of x8 quantizing one after the other at 4,096) becomes an rmsnorm_x8 of a
# workgroup per 1,024 elements; LSERVE_WGPU_FUSE_RESIDUAL=0 (same binary) runs the old loop,
# alternated. wgpu parity of matmul (the accumulate cases) and the norms on NVIDIA Vulkan.
# (2) CUDA: session 40's fused decode step (LSERVE_CUDA_FUSE_DECODE=1) with the changes made
# after its call 1 (fast silu, the L2 prefetch before a prologue, no 16-bit prologue), never
# measured, against the default (off), alternated.
BINS=.gpu/s41a/bins.tgz LIMIT=${LIMIT:-450} # lserve, backend_parity
. scripts/gpu_call_lib.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
WS="--kv-dtype f16 $S"
for r in 1 2 3; do
  W wq4k_new$r --dtype q4_k $WS
  LSERVE_WGPU_FUSE_RESIDUAL=0 W wq4k_off$r --dtype q4_k $WS
done
W wq8_new --dtype q8_0 $WS
LSERVE_WGPU_FUSE_RESIDUAL=0 W wq8_off --dtype q8_0 $WS
W wbf16_new $WS
LSERVE_WGPU_FUSE_RESIDUAL=0 W wbf16_off $WS
W wq4k_prof --dtype q4_k $WS --profile
LSERVE_WGPU_FUSE_RESIDUAL=0 W wq4k_offprof --dtype q4_k $WS --profile
export LSERVE_REQUIRE_WGPU=1
P wpar 150 wgpu::matmul wgpu::rmsnorm wgpu::add_rmsnorm --test-threads 1
export LSERVE_REQUIRE_CUDA=1
for r in 1 2; do
  LSERVE_CUDA_FUSE_DECODE=1 C q4k_fuse$r --dtype q4_k $S
  C q4k_off$r --dtype q4_k $S
done
LSERVE_CUDA_FUSE_DECODE=1 LSERVE_CUDA_FUSE_SILU=0 C q4k_nosilu --dtype q4_k $S
LSERVE_CUDA_FUSE_DECODE=1 C i8_fuse --dtype int8 $S
C i8_off --dtype int8 $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
