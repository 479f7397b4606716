#!/usr/bin/env bash
# Session 26, GPU call 4: #11's pipelined prefill attention, third form (`_pp`,
# LSERVE_CUDA_PREFILL_WGMMA=3): runs of unmasked tiles overlap the softmax of ti with
# O += P V(ti - 1); a boundary tile's round waits for both products before its masked softmax; the
# branch between them sits where no wgmma is in flight (ptxas: no C7518, 230 registers, no
# spills). Its parity first (the process that compiles the kernels), then against the plain kernel
# in the same binary, alternated.
BINS=.gpu/s26d/bins.tgz LIMIT=${LIMIT:-200} # lserve, backend_parity
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
LSERVE_CUDA_PREFILL_WGMMA=3 P par_pp 200 cuda::prefill_attention
S32="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
C plain_32k $S32 --profile
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_32k $S32 --profile
C plain_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_32k_2 $S32
LSERVE_CUDA_PREFILL_WGMMA=3 C pp_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
C plain_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
