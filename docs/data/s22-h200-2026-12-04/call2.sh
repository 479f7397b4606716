#!/usr/bin/env bash
# Session 22, GPU call 2: where sparse_decode_attention_kv16's time goes, unprofiled. Each CUT
# row ends the kernel after one phase (LSERVE_WGPU_KV16_CUT, the shader's header: 1 key-list
# loads, 2 selection scan, 3 key offsets, 4 K/V loads, 5 chunk loop): results wrong, timing
# only. The merge and the kernel left out on their own (LSERVE_WGPU_SKIP_OPS); the general kernel
# beside it (LSERVE_WGPU_DECODE_KV16=0); the unit test decode_matches_cpu (call 1 ran a stale
# binary of it).
BINS=.gpu/s22b/bins.tgz LIMIT=${LIMIT:-420} # lserve, backend_parity, libtests
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1 --dtype q4_k"
OLD() { LSERVE_WGPU_DECODE_KV16=0 W "$@"; }
W new_1 $D
OLD old_1 $D
for c in 1 2 3 4 5; do LSERVE_WGPU_KV16_CUT=$c W cut$c $D; done
LSERVE_WGPU_SKIP_OPS=sparse_decode_attention_merge_x8 W nomerge $D
LSERVE_WGPU_SKIP_OPS=sparse_decode_attention_kv16 W nokv16 $D
LSERVE_WGPU_SKIP_OPS=sparse_decode_attention_kv16,sparse_decode_attention_merge_x8 W noattn $D
W new_2 $D
OLD old_2 $D
E unit 200 $B/libtests decode_matches_cpu --test-threads 1
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
