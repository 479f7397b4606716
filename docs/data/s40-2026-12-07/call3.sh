#!/usr/bin/env bash
# NOT RUN: every device start after call 1 was refused this session. .gpu/s40b is the tree of commit
# 0e3ca44 built with the fused decode step ON by default (the committed default is off: with
# another build, set LSERVE_CUDA_FUSE_DECODE=1 for the fused rows).
# Session 40, GPU call 3 (call 2 cut down to what ~170 s of device time allows): the 32K sparse
# batch-1 Q4_K and int8 steps of the s40b tree (fast silu in the lanes, the first row group
# prefetched, no 16-bit GEMV prologue) with the fused decode step (its default in that build) and
# without it (LSERVE_CUDA_FUSE_DECODE=0), alternated; the first row carries the NVRTC compile.
BINS=.gpu/s40b/bins.tgz LIMIT=${LIMIT:-150} # lserve, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
C q4k_new0 --dtype q4_k $S
for r in 1 2; do
  LSERVE_CUDA_FUSE_DECODE=0 C q4k_off$r --dtype q4_k $S
  C q4k_new$r --dtype q4_k $S
done
LSERVE_CUDA_FUSE_DECODE=0 C i8_off --dtype int8 $S
C i8_new --dtype int8 $S
LSERVE_CUDA_FUSE_SILU=0 C q4k_nosilu --dtype q4_k $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
