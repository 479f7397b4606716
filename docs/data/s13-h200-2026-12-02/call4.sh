#!/usr/bin/env bash
# Session 13, GPU call 4: after the measured-loser wgpu matmul variants were removed (branch
# `clean`), the wgpu matmul parity on the H200 and the rows that would move if a default path had
# changed: f16 32K sparse batch 1 / 8 (batched GEMV), q4_k batch 1 (x8 GEMV), and a 4K prefill
# (cooperative-matrix GEMMs). Binaries in .gpu/s13c/bins.tgz.
BINS=.gpu/s13c/bins.tgz LIMIT=${LIMIT:-300}
. scripts/gpu_call_lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$L"
LSERVE_REQUIRE_WGPU=1 P pw 200 wgpu::matmul wgpu_plain::matmul --test-threads 2
W f16 --dtype f16 --kv-dtype f16 --token-budget 4096 --sparse on --contexts 32k --batch 1,8 --repeats 10
W q4k --dtype q4_k --kv-dtype f16 --token-budget 4096 --sparse on --contexts 32k --batch 1 --repeats 10
W pf4k --dtype f16 --kv-dtype f16 --sparse on --contexts 4k --prefill 4096
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
