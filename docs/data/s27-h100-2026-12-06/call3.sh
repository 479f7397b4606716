#!/usr/bin/env bash
# Session 27, GPU call 3: TMA page loads in the plain wgmma prefill kernel (`_tma`,
# LSERVE_CUDA_PREFILL_WGMMA=3: each warp's 16 keys as four boxes when they are one run of a page,
# cp.async otherwise; the tile lands on an mbarrier). Call 2's profile had the plain kernel's
# cp.async staging at ~24% of warp samples, longer than the S product it overlaps. Parity first
# (compiles the kernels), then `_tma` against the plain kernel in one binary, alternated.
BINS=.gpu/s27b/bins.tgz LIMIT=${LIMIT:-480} # lserve, backend_parity
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
LSERVE_CUDA_PREFILL_WGMMA=3 P par_tma 240 cuda::prefill_attention
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
LSERVE_CUDA_PREFILL_WGMMA=3 C tma_32k $S32 --profile
C plain_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 C tma_32k_2 $S32
C plain_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=3 C tma_32k_sp --contexts 4k --repeats 1 --prefill 32768 --sparse on
C plain_32k_sp --contexts 4k --repeats 1 --prefill 32768 --sparse on
LSERVE_CUDA_PREFILL_WGMMA=3 C tma_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C plain_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
