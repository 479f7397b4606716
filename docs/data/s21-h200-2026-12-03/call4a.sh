#!/usr/bin/env bash
# Session 21, GPU call 4a: rope_append_kv in one pass for 16-bit pools (rope_append_kv16: one
# dispatch and no f32 staging where there were two). The 32K q4_k step against call 3's build
# (lserve_prev), alternated; the KV writes' cost by ablation; wgpu and CUDA parity of
# rope_append_kv (now also head_dim 18 for the 16-bit pools) and wgpu's decode attention; the
# first part of the default model kept in /root (call4b.sh, call4c.sh as call1b/1c).
BINS=.gpu/s21h/bins.tgz LIMIT=${LIMIT:-420} # lserve, lserve_prev, backend_parity, wgpu_e2e, quant_weights
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
cp .gpu/s21h/smol.part.00 /root/
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1"
W new_1 $D --dtype q4_k
LSERVE_BIN=$B/lserve_prev W prev_1 $D --dtype q4_k
W new_2 $D --dtype q4_k
LSERVE_BIN=$B/lserve_prev W prev_2 $D --dtype q4_k
W new_3 $D --dtype q4_k
LSERVE_BIN=$B/lserve_prev W prev_3 $D --dtype q4_k
LSERVE_WGPU_SKIP_OPS=rope_append_kv,rope_append_kv16,rope_append_kv_pack,rope_append_kv_summary W no_kv $D --dtype q4_k
W new_q8 $D --dtype q8_0
LSERVE_BIN=$B/lserve_prev W prev_q8 $D --dtype q8_0
W new_f16 $D --dtype f16
P par_rope 200 rope_append_kv --test-threads 2
P par_att 200 wgpu::sparse_decode_attention wgpu::prefill_attention --test-threads 2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
