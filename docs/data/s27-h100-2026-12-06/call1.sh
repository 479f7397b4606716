#!/usr/bin/env bash
# Session 27, GPU call 1: #11's prefill attention with TMA page loads (`_tma`,
# LSERVE_CUDA_PREFILL_WGMMA=3: `_ws` whose producer warpgroup copies each half-warp's 16 keys as
# two 64 x 16 boxes when they are one run of a page, row by row with cp.async otherwise). Parity
# of `_tma` and `_ws` (the process that compiles the kernels), then `_tma` against the plain
# kernel in one binary, alternated, profiled and not.
BINS=.gpu/s27a/bins.tgz LIMIT=${LIMIT:-480} # lserve, backend_parity
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
LSERVE_CUDA_PREFILL_WGMMA=3 P par_tma 240 cuda::prefill_attention
LSERVE_CUDA_PREFILL_WGMMA=2 P par_ws 120 cuda::prefill_attention
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
LSERVE_CUDA_PREFILL_WGMMA=3 C tma_32k $S32 --profile
C plain_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 C tma_32k_2 $S32
C plain_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=2 C ws_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 C tma_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C plain_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
