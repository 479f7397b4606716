#!/usr/bin/env bash
# Session 22, GPU call 1: the latency-bound wgpu decode attention (sparse_decode_attention_kv16:
# one dispatch for both head kinds, every K/V load of a 64-key chunk issued at once) against the
# general kernel in the same binary (LSERVE_WGPU_DECODE_KV16=0), alternated; unprofiled ablation
# of the attention for both; the split count knob; parity of the new kernel on the H200.
BINS=.gpu/s22a/bins.tgz LIMIT=${LIMIT:-500} # lserve, backend_parity, libtests (lserve's unit tests)
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1 --dtype q4_k"
OLD() { LSERVE_WGPU_DECODE_KV16=0 W "$@"; }
ATT=sparse_decode_attention,sparse_decode_attention_kv16,sparse_decode_attention_merge_x8,sparse_decode_attention_merge
W new_1 $D
OLD old_1 $D
W new_2 $D
OLD old_2 $D
LSERVE_WGPU_SKIP_OPS=$ATT W new_noattn $D
LSERVE_WGPU_SKIP_OPS=$ATT OLD old_noattn $D
LSERVE_WGPU_DECODE_WORKGROUPS=256 W new_wg256 $D
LSERVE_WGPU_DECODE_WORKGROUPS=4096 W new_wg4096 $D
W new_3 $D
OLD old_3 $D
W new_prof $D --profile
OLD old_prof $D --profile
B8="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 8 --dtype f16"
W new_b8 $B8
OLD old_b8 $B8
W new_dense --kv-dtype f16 --contexts 32k --sparse off --repeats 5 --batch 1 --dtype q4_k
OLD old_dense --kv-dtype f16 --contexts 32k --sparse off --repeats 5 --batch 1 --dtype q4_k
E unit 200 $B/libtests decode_matches_cpu --test-threads 1
P par_att 200 wgpu::sparse_decode_attention --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
