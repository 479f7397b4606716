#!/usr/bin/env bash
# Session 42, GPU call 1. Binaries built on the development machine (git-ignored): .gpu/s42c =
# this session's tree (lserve, backend_parity), .gpu/s42a = lserve at the session's start
# (3cc1371).
# (1) wgpu (#14): a batch-1 step's q|k|v GEMV runs rope_append_kv16 in its epilogue
# (matmul_gemv_x8_rope, Backend::matmul_rope_append_kv) and its gate|up GEMV silu_mul_x8
# (matmul_gemv_x8_silu_mul, Backend::matmul_silu_mul; docs/backends.md "The rotation in the
# q|k|v GEMV", "silu_mul in the gate|up GEMV"): parity on NVIDIA's Vulkan first, then the Q4_K
# 32K sparse step with both (the default), with each turned off (LSERVE_WGPU_FUSE_ROPE=0,
# LSERVE_WGPU_FUSE_SILU=0, same binary), both off, and the session's start, alternated three
# times; Q8_0 with and without; a profile.
# (2) CUDA (#14): session 40's fused decode step (LSERVE_CUDA_FUSE_DECODE=1) with the changes
# made after its one measured call (fast silu, the L2 prefetch before a prologue, no 16-bit
# prologue), never measured since, against the default (off), alternated.
BINS=.gpu/s42c/bins.tgz LIMIT=${LIMIT:-520} # lserve, backend_parity
. scripts/gpu_call_lib.sh
OLD=/root/s42a; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s42a/bins.tgz -C $OLD
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
WS="--kv-dtype f16 $S"
export LSERVE_REQUIRE_WGPU=1
P wpar 150 wgpu::matmul_rope_append_kv wgpu::matmul_silu_mul wgpu::rope_append_kv wgpu::silu_mul wgpu::matmul:: --test-threads 1
for r in 1 2 3; do
  W wq4k_new$r --dtype q4_k $WS
  LSERVE_WGPU_FUSE_ROPE=0 W wq4k_norope$r --dtype q4_k $WS
  LSERVE_WGPU_FUSE_SILU=0 W wq4k_nosilu$r --dtype q4_k $WS
  LSERVE_WGPU_FUSE_ROPE=0 LSERVE_WGPU_FUSE_SILU=0 W wq4k_off$r --dtype q4_k $WS
  LSERVE_BIN=$OLD/lserve W wq4k_old$r --dtype q4_k $WS
done
W wq8_new --dtype q8_0 $WS
LSERVE_WGPU_FUSE_ROPE=0 LSERVE_WGPU_FUSE_SILU=0 W wq8_off --dtype q8_0 $WS
W wq4k_prof --dtype q4_k $WS --profile
export LSERVE_REQUIRE_CUDA=1
for r in 1 2; do
  LSERVE_CUDA_FUSE_DECODE=1 C q4k_fuse$r --dtype q4_k $S
  C q4k_off$r --dtype q4_k $S
done
LSERVE_CUDA_FUSE_DECODE=1 C i8_fuse --dtype int8 $S
C i8_off --dtype int8 $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
