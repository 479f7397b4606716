#!/usr/bin/env bash
# Session 30, GPU call 3: the bulk-copy GEMVs' shape swept (blocks an SM `bulk:N`, stages a block
# LSERVE_CUDA_MMV_STAGES) against the register kernels, 8B 32K sparse batch-1 step, same binary.
BINS=.gpu/s30c/bins.tgz LIMIT=${LIMIT:-560} # lserve
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
Q() { local name=$1 mode=$2 st=$3; shift 3; LSERVE_CUDA_MMV=$mode LSERVE_CUDA_MMV_STAGES=$st C "$name" "$@" $S; }
Q q4k_def auto 8 --dtype q4_k
Q q4k_bulk bulk 8 --dtype q4_k
Q q4k_bulk4 bulk:4 8 --dtype q4_k
Q q4k_bulk2 bulk:2 8 --dtype q4_k
Q q4k_bulk6 bulk:6 8 --dtype q4_k
Q q4k_bulk4s2 bulk:4 2 --dtype q4_k
Q q4k_bulk3 bulk:3 8 --dtype q4_k
Q q4k_def2 auto 8 --dtype q4_k
Q q4k_bulk4s3 bulk:4 3 --dtype q4_k
Q q4k_bulk8s1 bulk:8 1 --dtype q4_k
Q i8_def auto 8 --dtype int8
Q i8_bulkf bulkf 8 --dtype int8
Q i8_bulkf2 bulkf:2 8 --dtype int8
Q i8_bulkf4 bulkf:4 8 --dtype int8
Q q8_def auto 8 --dtype q8_0
Q q8_bulkf bulkf 8 --dtype q8_0
Q q8_bulkf2 bulkf:2 8 --dtype q8_0
Q q8_bulkf4 bulkf:4 8 --dtype q8_0
Q q4k_def3 auto 8 --dtype q4_k
Q q4k_bulk2s8 bulk:2 8 --dtype q4_k
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
