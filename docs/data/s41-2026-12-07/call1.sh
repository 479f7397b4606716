#!/usr/bin/env bash
# RAN (with LIMIT=340) on an H100 at ~21:18 UTC: output in call1/; its LIMIT skipped every row after
# the CUDA parity step (the prefill rows ran in call2.sh on the same warm machine). Binaries built
# on the development machine (git-ignored): .gpu/s41c = this session's tree before the lazy
# rescaling landed (the wgpu changes below), .gpu/s41p = the same with the lazy rescaling of the
# Hopper prefill's softmax (then a patch; it landed after these calls).
# Session 41, GPU call 1 (s41p = with the lazy rescaling; s41c = without).
# (1) wgpu: a batch-1 step's o_proj and down add into the residual stream in their GEMVs' stores
# (Backend::matmul_accumulates at one row), so each add_rmsnorm_x8 (one workgroup quantizing four
# rounds one after the other at 4,096) becomes an rmsnorm_x8 of a workgroup per 1,024 elements;
# LSERVE_WGPU_FUSE_RESIDUAL=0 (same binary) runs the old loop; and a step's first submission
# after 4 dispatches, doubling to 64 (LSERVE_WGPU_FIRST_SUBMIT=64: 64 throughout, as before),
# alternated. wgpu parity of matmul (the accumulate cases) and the norms on NVIDIA Vulkan.
# (2) CUDA prefill: the Hopper kernel's softmax moves its reference maximum lazily (only past
# 2^8, FlashAttention-4's rescaling), so most tiles skip the output's rescale: 32K dense rows
# against s41c, alternated; parity of the prefill kernels first.
# (3) CUDA decode: session 40's fused decode step (LSERVE_CUDA_FUSE_DECODE=1) with the changes
# made after its call 1 (fast silu, the L2 prefetch before a prologue, no 16-bit prologue), never
# measured, against the default (off), alternated.
BINS=.gpu/s41p/bins.tgz LIMIT=${LIMIT:-500} # lserve, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
OLD=/root/s41c; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s41c/bins.tgz -C $OLD
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
WS="--kv-dtype f16 $S"
# new: both; fs64: the fixed 64-dispatch submissions; nofuse: add_rmsnorm; old: neither (the
# session's start).
for r in 1 2 3; do
  W wq4k_new$r --dtype q4_k $WS
  LSERVE_WGPU_FIRST_SUBMIT=64 W wq4k_fs64_$r --dtype q4_k $WS
  LSERVE_WGPU_FUSE_RESIDUAL=0 W wq4k_nofuse$r --dtype q4_k $WS
  LSERVE_WGPU_FIRST_SUBMIT=64 LSERVE_WGPU_FUSE_RESIDUAL=0 W wq4k_old$r --dtype q4_k $WS
done
W wq8_new --dtype q8_0 $WS
LSERVE_WGPU_FIRST_SUBMIT=64 LSERVE_WGPU_FUSE_RESIDUAL=0 W wq8_old --dtype q8_0 $WS
W wq4k_prof --dtype q4_k $WS --profile
LSERVE_WGPU_FUSE_RESIDUAL=0 W wq4k_nofuseprof --dtype q4_k $WS --profile
export LSERVE_REQUIRE_WGPU=1
P wpar 120 wgpu::matmul wgpu::rmsnorm wgpu::add_rmsnorm --test-threads 1
export LSERVE_REQUIRE_CUDA=1
PF="--contexts 4k --repeats 1"
P cpar 200 cuda_prefill_ws::prefill_attention cuda::prefill_attention --test-threads 1
for r in 1 2; do
  C dense32_new$r $PF --prefill 32768
  LSERVE_BIN=$OLD/lserve C dense32_old$r $PF --prefill 32768
done
for r in 1 2; do
  LSERVE_CUDA_FUSE_DECODE=1 C q4k_fuse$r --dtype q4_k $S
  C q4k_off$r --dtype q4_k $S
done
LSERVE_CUDA_FUSE_DECODE=1 C i8_fuse --dtype int8 $S
C i8_off --dtype int8 $S
C s32_new $PF --prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096
LSERVE_BIN=$OLD/lserve C s32_old $PF --prefill 32768 --sparse on --prefill-budget 2048 --prefill-dense-below 4096
left && E torch 150 python3 scripts/torch_prefill_bench.py --lengths 32768 --repeats 2
[ -f "$OUT/torch.txt" ] && grep -vE "^\s*$" "$OUT/torch.txt" | tail -3 | tee -a "$L"
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
