#!/usr/bin/env bash
# Session 30, GPU call 5 (commit da9d3bd; call 4 never found a machine and the session's device
# time was nearly spent): the default modes' parity where they changed — the two-pass argmax,
# int8 rows and packed Q8_0 now streaming their rows by bulk copies, the bulk modes — then
# cuda_e2e and two rows if time is left.
BINS=.gpu/s30d/bins.tgz LIMIT=${LIMIT:-170} # lserve, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$L"
P par 150 cuda::argmax cuda::matmul::w_int8 cuda::matmul::w_q8_0 cuda::matmul::w_q4_k cuda_mmv_bulk:: cuda_mmv_bulkf_loop::
E e2e 60 $B/cuda_e2e
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
LSERVE_CUDA_MMV=auto C q8 --dtype q8_0 $S
LSERVE_CUDA_MMV=regf C q8_regf --dtype q8_0 $S
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
