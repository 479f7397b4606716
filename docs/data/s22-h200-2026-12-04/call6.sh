#!/usr/bin/env bash
# Session 22, GPU call 6: rope_append_kv16 folding a single token into the page summary (no
# rope_append_kv_summary dispatch in a batch-1 step) against call 3's build at GMAX 4 (lserve_prev:
# the same kernels otherwise), alternated; wgpu parity of rope_append_kv and the decode attention.
BINS=.gpu/s22f/bins.tgz LIMIT=${LIMIT:-400} # lserve, lserve_prev, backend_parity, wgpu_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
export LSERVE_WGPU_KV16_GMAX=4 # lserve_prev's knob; the new build's default
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1 --dtype q4_k"
PREV() { LSERVE_BIN=$B/lserve_prev W "$@"; }
W new_1 $D
PREV prev_1 $D
W new_2 $D
PREV prev_2 $D
W new_3 $D
PREV prev_3 $D
W new_prof $D --profile
W new_q8 ${D/q4_k/q8_0}
PREV prev_q8 ${D/q4_k/q8_0}
B8="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 8 --dtype f16"
W new_b8 $B8
PREV prev_b8 $B8
P par_kv 200 wgpu::rope_append_kv wgpu::sparse_decode_attention wgpu::page_select --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
