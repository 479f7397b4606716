#!/usr/bin/env bash
# Session 27, GPU call 4: `_tma` pipelined (FlashAttention-3's intra-warpgroup overlap on top of
# the TMA page loads: round ti issues S(ti) and P V(ti - 1), the softmax of ti runs while P V(ti -
# 1) does; K and V land on barriers of their own). Parity first (compiles the kernels), then the
# new `_tma` against the plain kernel and call 3's unpipelined `_tma` (lserve_prev), alternated.
BINS=.gpu/s27c/bins.tgz LIMIT=${LIMIT:-480} # lserve, backend_parity, lserve_prev (call 3's lserve)
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
LSERVE_CUDA_PREFILL_WGMMA=3 P par_tma 240 cuda::prefill_attention
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_32k $S32 --profile
C plain_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 LSERVE_BIN=$B/lserve_prev C tma1_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_32k_2 $S32
C plain_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_32k_sp --contexts 4k --repeats 1 --prefill 32768 --sparse on
C plain_32k_sp --contexts 4k --repeats 1 --prefill 32768 --sparse on
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C plain_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
