#!/usr/bin/env bash
# Session 27, GPU call 8: `_ws` rebuilt on call 7's profile of call 1's `_ws` + TMA (icache
# misses, "no instruction" 4.2 of 14.9 cycles an issue, at the per-element mask's branches on
# every tile): its producer copies runs by TMA, its consumers mask boundary tiles only (runs of
# unmasked tiles, as session 26's form), code 106 KB instead of 165. Parity of `_ws`
# (LSERVE_CUDA_PREFILL_WGMMA=2) and of the default `_tma`, then both at 32K.
BINS=.gpu/s27f/bins.tgz LIMIT=${LIMIT:-190}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
LSERVE_CUDA_PREFILL_WGMMA=2 P par_ws 150 cuda::prefill_attention
P par_tma 30 cuda::prefill_attention
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
LSERVE_CUDA_PREFILL_WGMMA=2 C ws_32k $S32 --profile
C tma_32k $S32 --profile
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
