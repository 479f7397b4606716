#!/usr/bin/env bash
# Session 20, GPU call 5a: the final build (the kernel text of calls 2 and 4, shader checks off by
# default). The 4K prefill twice and profiled, the 32K q4_k step and its profile, wgpu parity of
# the GEMM, embedding and prefill attention (processes of at most 25 tests), and the first part
# of the default model kept in /root (call5b.sh brings the second, call5c.sh the third and runs
# wgpu_e2e).
BINS=.gpu/s20f/bins.tgz LIMIT=${LIMIT:-300} # lserve, backend_parity, wgpu_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cp .gpu/s20c/smol.part.00 /root/
S="--dtype f16 --kv-dtype f16 --prefill 4096 --sparse on"
W pf1 $S
W pf2 $S
W pf_prof $S --profile
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
W d_q4k $D --dtype q4_k --batch 1
W d_q4k_prof $D --dtype q4_k --batch 1 --profile
P par_mm 150 wgpu::matmul wgpu::embed --test-threads 2
P par_pa 150 wgpu::prefill_attention --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
