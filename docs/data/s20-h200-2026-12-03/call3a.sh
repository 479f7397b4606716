#!/usr/bin/env bash
# Session 20, GPU call 3a: the final code — matmul_coop_128 in k steps of 64 (one stage), shader
# modules without wgpu's runtime checks by default (ShaderChecks::Off; LSERVE_WGPU_CHECKS=1 puts
# them back, =bounds removes only the index clamps). wgpu parity on the H200 (two test threads: with
# more, adapters fail to open), the 4K prefill and the 32K decode steps per checks mode; the first
# part of the default model kept in /root (call3b.sh brings the second, call3c.sh the third and runs
# wgpu_e2e on it).
BINS=.gpu/s20c/bins.tgz LIMIT=${LIMIT:-420} # lserve, backend_parity, wgpu_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cp .gpu/s20c/smol.part.00 /root/
S="--dtype f16 --kv-dtype f16 --prefill 4096 --sparse on"
W pf_off1 $S
LSERVE_WGPU_CHECKS=bounds W pf_bounds $S
LSERVE_WGPU_CHECKS=1 W pf_on $S
W pf_off2 $S
W pf_off_prof $S --profile
LSERVE_WGPU_CHECKS=1 W pf_on_prof $S --profile
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
for r in 1 2; do
  for c in 0 bounds 1; do
    LSERVE_WGPU_CHECKS=$c W d_q4k_b1_${c}_$r --dtype q4_k --batch 1 $D
    LSERVE_WGPU_CHECKS=$c W d_f16_b8_${c}_$r --dtype f16 --batch 8 $D
  done
done
P par 240 wgpu:: wgpu_plain:: --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
