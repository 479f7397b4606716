#!/usr/bin/env bash
# Session 37, GPU call 5 (wgpu only, no NVRTC): one wgpu instance per process
# (backend::probe::wgpu_instance) instead of one per backend — call 1b's 34 wgpu tests in one
# process (30 passed, then "no wgpu adapter found"), then all of backend_parity's wgpu tests.
# Not run in session 37: the device budget left (218 s) was too little to start a machine.
BINS=.gpu/s37e/bins.tgz LIMIT=${LIMIT:-100} # lserve, backend_parity, gemma3
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
E w_log 60 $B/backend_parity wgpu::sparse_decode_attention wgpu::page_select --test-threads 1
E w_all 80 $B/backend_parity wgpu
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
