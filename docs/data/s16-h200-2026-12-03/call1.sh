#!/usr/bin/env bash
# Session 16, GPU call 1: the streamed batch-1 quantized GEMV (LSERVE_CUDA_MMV=stream[:N],
# matmul_gemv_<fmt>_m1_stream: each warp's weight loads a ring of steps ahead of its arithmetic,
# a persistent grid of N blocks per SM). Parity of every m == 1 mode (the Raw/load/calc split
# touches the in-block and pre readers too), then the Llama-3-8B 32K sparse batch-1 step per
# format: auto (today's default) vs stream:2 / stream:3, alternated twice.
BINS=.gpu/s16a/bins.tgz LIMIT=${LIMIT:-480}
. scripts/gpu_call_lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
LSERVE_REQUIRE_CUDA=1 P c_mmv 280 cuda_mmv_stream cuda_mmv_inblock cuda_mmv_pre cuda::matmul
grep -q "test result: ok" $OUT/c_mmv.txt || { echo "parity failed" | tee -a $L; exit 0; }
S() { C "$@" --batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  for d in q4_k q8_0 q6_k q5_k; do
    S ${d}_auto_$r --dtype $d
    LSERVE_CUDA_MMV=stream S ${d}_stream2_$r --dtype $d
    LSERVE_CUDA_MMV=stream:3 S ${d}_stream3_$r --dtype $d
  done
done
LSERVE_CUDA_MMV=stream S q4_k_stream_prof --dtype q4_k --profile
S q4_k_auto_prof --dtype q4_k --profile
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
