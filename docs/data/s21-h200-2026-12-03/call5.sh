#!/usr/bin/env bash
# Session 21, GPU call 5: the final build (after call 4's refactors and the whole-row X8
# transfers). The 32K decode step of q4_k, q8_0 and f16 weights; wgpu parity of every op that
# changed this session and CUDA parity of the norms (the new refusal checks) and rope_append_kv,
# in processes of at most 25 wgpu tests.
BINS=.gpu/s21k/bins.tgz LIMIT=${LIMIT:-400} # lserve, backend_parity
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1"
W q4k_1 $D --dtype q4_k
W q4k_2 $D --dtype q4_k
W q8 $D --dtype q8_0
W f16 $D --dtype f16
P par_a 200 wgpu::rmsnorm wgpu::add_rmsnorm wgpu::head_rmsnorm wgpu::silu_mul wgpu::rope_append_kv wgpu::sparse_decode_attention --test-threads 2
P par_mm 200 wgpu::matmul::w_ --test-threads 2
P par_cuda 300 cuda::rmsnorm cuda::add_rmsnorm cuda::silu_mul cuda::rope_append_kv --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
