#!/usr/bin/env bash
# NOT RUN: every device start after call 1 was refused this session. .gpu/s40b is the tree of commit
# 0e3ca44 built with the fused decode step ON by default (the committed default is off: with
# another build, set LSERVE_CUDA_FUSE_DECODE=1 for the fused rows).
# Session 40, GPU call 2: call 1's fused decode step measured slower (Q4_K 3.16-3.18 ms vs 3.01-3.02
# without it, bf16 6.87 vs 6.35, int8 even). Changed: silu in the GEMVs' lanes by the fast
# exponential and division (expf and an IEEE division per element had held every block's first
# weight loads back), the first row group's lines prefetched into L2 before a prologue, no norm
# prologue for the 16-bit GEMV (its warps read x per output column from L1: the norm's weight
# doubled that), and the parity reference snapping the op's x to the digits' grid. Parity and the
# end-to-end tests again, then the 32K sparse batch-1 rows with it, without it
# (LSERVE_CUDA_FUSE_DECODE=0) and with the norms only (LSERVE_CUDA_FUSE_SILU=0), alternated.
# Short of device time (failed starts): the end-to-end tests first (their NVRTC compile serves
# the benches), the parity suite last, under LIMIT.
BINS=.gpu/s40b/bins.tgz LIMIT=${LIMIT:-400} # lserve, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
E e2e 200 $B/cuda_e2e --test-threads 1
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
for r in 1 2; do
  C q4k_new$r --dtype q4_k $S
  LSERVE_CUDA_FUSE_DECODE=0 C q4k_off$r --dtype q4_k $S
  [ $r = 1 ] && LSERVE_CUDA_FUSE_SILU=0 C q4k_nosilu$r --dtype q4_k $S
done
C i8_new --dtype int8 $S
LSERVE_CUDA_FUSE_DECODE=0 C i8_off --dtype int8 $S
C bf16_new $S
LSERVE_CUDA_FUSE_DECODE=0 C bf16_off $S
C q4k_prof --dtype q4_k $S --profile
P par 220 cuda::matmul --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
