#!/usr/bin/env bash
# NOT RUN (session 42 had no device time left after call 2). To run it: apply rope-prefetch.patch
# (`git apply docs/data/s42-2026-12-07/rope-prefetch.patch`, the shaders of commit 8ecf2d4, reverted
# on main in 44329b6 because they were never run on a GPU), build it as .gpu/s42d and the tree
# without it as .gpu/s42c.
# Session 42, GPU call 3: matmul_gemv_x8_rope with its epilogue's loads taken before the GEMV
# (rope16_quad.wgsl `Quad`: the position, the angles, the slot, the head_map entry and the page
# summary's old values; call 2's profile had the fused q|k|v GEMV at 19.3 us against 11.9 for the
# plain one). .gpu/s42d = this tree; .gpu/s42c = calls 1-2's (the loads after the GEMV),
# alternated, with the rotation off (LSERVE_WGPU_FUSE_ROPE=0) beside them; parity first.
BINS=.gpu/s42d/bins.tgz LIMIT=${LIMIT:-150} # lserve, backend_parity
. scripts/gpu_call_lib.sh
PREV=/root/s42c; mkdir -p $PREV; [ -x $PREV/lserve ] || tar -xzf .gpu/s42c/bins.tgz -C $PREV
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
WS="--kv-dtype f16 --batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
export LSERVE_REQUIRE_WGPU=1
P wpar 90 wgpu::matmul_rope_append_kv wgpu::rope_append_kv wgpu::matmul_silu_mul --test-threads 1
for r in 1 2; do
  W wq4k_pre$r --dtype q4_k $WS
  LSERVE_BIN=$PREV/lserve W wq4k_c$r --dtype q4_k $WS
done
LSERVE_WGPU_FUSE_ROPE=0 W wq4k_norope --dtype q4_k $WS
W wq4k_prof --dtype q4_k $WS --profile
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
