#!/usr/bin/env bash
# Session 24, GPU call 2: the final code (programmatic dependent launch removed again; page_select's
# bound_shrink kept) — CUDA page_select (the shrink cases in `ranks`), the decode ops it feeds,
# cuda_e2e; wgpu page_select on the same GPU's Vulkan.
BINS=.gpu/s24b/bins.tgz LIMIT=${LIMIT:-240} # lserve, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
P par 200 cuda::page_select:: cuda::sparse_decode_attention:: cuda::rope_append_kv::
E e2e 120 $B/cuda_e2e
LSERVE_REQUIRE_WGPU=1 P wpar 100 wgpu::page_select::
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
