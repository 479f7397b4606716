#!/usr/bin/env bash
# Session 26, GPU call 3: #11's Hopper prefill attention, the pipelined schedule as a variant
# (`_pp`, LSERVE_CUDA_PREFILL_WGMMA=3: a round issues S(ti) with O += P V(ti - 1), K staged a round
# ahead of V, pm_mask's selects on every tile so no branch sits where a wgmma is in flight) against
# the plain one in the same process binary, alternated; then its parity tests.
BINS=.gpu/s26c/bins.tgz LIMIT=${LIMIT:-300} # lserve, backend_parity
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
C plain_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_32k $S32 --profile
C plain_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C plain_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
LSERVE_CUDA_PREFILL_WGMMA=3 P par_pp 150 cuda::prefill_attention
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
