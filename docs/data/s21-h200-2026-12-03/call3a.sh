#!/usr/bin/env bash
# Session 21, GPU call 3a: the X8 norms rewritten (shaders/row_norm_x8.wgsl: a vec4 a thread, the
# values held in registers from the reduction to the quantizing, where call 1's tail read them
# again after a storageBarrier). The 32K q4_k step against call 2's build (lserve_prev),
# alternated; the norms' cost by ablation; wgpu parity of the norms and the matmul; the first
# part of the default model kept in /root (call3b.sh, call3c.sh as call1b/1c).
BINS=.gpu/s21e/bins.tgz LIMIT=${LIMIT:-420} # lserve, lserve_prev, backend_parity, wgpu_e2e, quant_weights
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cp .gpu/s21e/smol.part.00 /root/
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1 --dtype q4_k"
W new_1 $D
LSERVE_BIN=$B/lserve_prev W prev_1 $D
W new_2 $D
LSERVE_BIN=$B/lserve_prev W prev_2 $D
W new_3 $D
LSERVE_BIN=$B/lserve_prev W prev_3 $D
LSERVE_WGPU_SKIP_OPS=add_rmsnorm_x8,rmsnorm_x8,add_rmsnorm,rmsnorm W no_norm $D
W new_q8 $D --dtype q8_0
P par_norm 200 wgpu::rmsnorm wgpu::add_rmsnorm wgpu::head_rmsnorm wgpu::silu_mul wgpu::sparse_decode_attention --test-threads 2
P par_mm 200 wgpu::matmul::w_ --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
