#!/usr/bin/env bash
# Session 20, GPU call 2: wgpu's shader runtime checks (LSERVE_WGPU_CHECKS: all = wgpu's defaults;
# nobounds = create_shader_module_trusted with ShaderRuntimeChecks::unchecked(): no index clamps,
# loop bounding or division checks; none = that and no zeroed workgroup memory) on the 4K prefill
# (default GEMM and k64) and the 32K decode step (f16 batch 1 / 8, q4_k batch 1); parity of the
# hot kernels with none (page_select now zeroes its own workgroup atomics).
BINS=.gpu/s20b/bins.tgz LIMIT=${LIMIT:-545}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
S="--dtype f16 --kv-dtype f16 --prefill 4096 --sparse on"
for c in all nobounds none; do
  for v in default k64; do LSERVE_WGPU_CHECKS=$c LSERVE_WGPU_COOP_GEMM=$v W pu_${v}_$c $S; done
done
LSERVE_WGPU_CHECKS=nobounds LSERVE_WGPU_COOP_GEMM=k64 W pf_k64_nobounds $S --profile
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
for r in 1 2; do
  for c in all nobounds; do
    LSERVE_WGPU_CHECKS=$c W d_f16_b1_${c}_$r --dtype f16 --batch 1 $D
    LSERVE_WGPU_CHECKS=$c W d_q4k_b1_${c}_$r --dtype q4_k --batch 1 $D
    LSERVE_WGPU_CHECKS=$c W d_f16_b8_${c}_$r --dtype f16 --batch 8 $D
  done
done
for c in none; do LSERVE_WGPU_CHECKS=$c W d_q4k_b1_$c --dtype q4_k --batch 1 $D; LSERVE_WGPU_CHECKS=$c W d_f16_b8_$c --dtype f16 --batch 8 $D; done
LSERVE_WGPU_CHECKS=none LSERVE_WGPU_COOP_GEMM=k64 P par_none 200 wgpu::matmul wgpu::prefill_attention \
  wgpu::sparse_decode_attention wgpu::page_select wgpu::embed
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
