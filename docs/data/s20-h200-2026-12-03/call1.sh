#!/usr/bin/env bash
# Session 20, GPU call 1: the wgpu tensor-core prefill GEMM (#11's wgpu 4K prefill <= 800 ms).
# Measurement variants of matmul_coop_128 (LSERVE_WGPU_COOP_GEMM; shaders/matmul_coop_128_v.wgsl):
# k64 (k steps of 64, single-buffered, two barriers a step), n64 (128 x 64 tiles of 4 subgroups),
# n64k64 (both). The 4K prefill, profiled and not, then parity of each on the coop GEMM's dtypes.
BINS=.gpu/s20a/bins.tgz LIMIT=${LIMIT:-545}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
S="--dtype f16 --kv-dtype f16 --prefill 4096 --sparse on"
for v in default k64 n64 n64k64; do LSERVE_WGPU_COOP_GEMM=$v W pf_$v $S --profile; done
for v in default k64 n64 n64k64; do LSERVE_WGPU_COOP_GEMM=$v W pu_$v $S; done
for v in default k64 n64 n64k64; do
  LSERVE_WGPU_COOP_GEMM=$v P par_$v 120 wgpu::matmul::w_f16 wgpu::matmul::w_bf16 wgpu::matmul::w_q4_k wgpu::matmul::w_q8_0
done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
