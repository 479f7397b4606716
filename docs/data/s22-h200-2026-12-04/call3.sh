#!/usr/bin/env bash
# Session 22, GPU call 3: the merge with 16 loads in flight and X8 rows of up to 128 dims in one
# pass (both kernels use it), and sparse_decode_attention_kv16 at 8 or 4 query heads a workgroup
# (LSERVE_WGPU_KV16_GMAX=4: fewer registers), against the general kernel, alternated; parity of
# the decode attention (now also head_dim 256, whose X8 merge crosses chunks) and the unit test
# at both head counts; the first part of the default model kept in /root (call4.sh).
BINS=.gpu/s22c/bins.tgz LIMIT=${LIMIT:-420} # lserve, backend_parity, libtests, wgpu_e2e, quant_weights
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cp .gpu/s22c/smol.part.00 /root/
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1 --dtype q4_k"
OLD() { LSERVE_WGPU_DECODE_KV16=0 W "$@"; }
G4() { LSERVE_WGPU_KV16_GMAX=4 W "$@"; }
W new_1 $D
G4 g4_1 $D
OLD old_1 $D
W new_2 $D
G4 g4_2 $D
OLD old_2 $D
LSERVE_WGPU_SKIP_OPS=sparse_decode_attention_kv16,sparse_decode_attention_merge_x8 W noattn $D
W new_3 $D
G4 g4_3 $D
OLD old_3 $D
W new_prof $D --profile
G4 g4_prof $D --profile
B8="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 8 --dtype f16"
W new_b8 $B8
G4 g4_b8 $B8
OLD old_b8 $B8
E unit 200 $B/libtests decode_matches_cpu --test-threads 1
LSERVE_WGPU_KV16_GMAX=4 E unit_g4 200 $B/libtests decode_matches_cpu --test-threads 1
P par_att 200 wgpu::sparse_decode_attention --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
