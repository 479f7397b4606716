#!/usr/bin/env bash
# Session 21, GPU call 2: where the wgpu q4_k 32K step's time goes, unprofiled. Each row leaves
# some ops out of the step (LSERVE_WGPU_SKIP_OPS, measurement only: the results are wrong), so
# the difference to the full step is what those ops cost with their launches and barriers.
# Then the host's recording time per step (LSERVE_LOG trace of llama.rs `record_us`). The build
# also reuses rope_append_kv's staging buffers (scratch slots, a cached identity map) where it
# allocated four buffers and uploaded one per layer: against call 1's build (lserve_prev).
BINS=.gpu/s21d/bins.tgz LIMIT=${LIMIT:-480} # lserve, lserve_prev
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
D="--kv-dtype f16 --contexts 32k --sparse on --token-budget 4096 --repeats 10 --batch 1 --dtype q4_k"
S() { local name=$1 ops=$2; LSERVE_WGPU_SKIP_OPS=$ops W "$name" $D; }
W full_1 $D
LSERVE_BIN=$B/lserve_prev W prev_1 $D
S no_norm add_rmsnorm_x8,rmsnorm_x8,add_rmsnorm,rmsnorm
S no_attn sparse_decode_attention,sparse_decode_attention_merge_x8,sparse_decode_attention_merge
S no_gemv matmul_gemv_x8
S no_kv rope_append_kv,rope_append_kv_pack,rope_append_kv_summary
S no_sel page_select,page_select_norm,page_select_topk
S no_silu silu_mul_x8,silu_mul
S only_gemv add_rmsnorm_x8,rmsnorm_x8,add_rmsnorm,rmsnorm,sparse_decode_attention,sparse_decode_attention_merge_x8,sparse_decode_attention_merge,rope_append_kv,rope_append_kv_pack,rope_append_kv_summary,page_select,page_select_norm,page_select_topk,silu_mul_x8,silu_mul
S nothing add_rmsnorm_x8,rmsnorm_x8,add_rmsnorm,rmsnorm,sparse_decode_attention,sparse_decode_attention_merge_x8,sparse_decode_attention_merge,rope_append_kv,rope_append_kv_pack,rope_append_kv_summary,page_select,page_select_norm,page_select_topk,silu_mul_x8,silu_mul,matmul_gemv_x8
W full_2 $D
LSERVE_BIN=$B/lserve_prev W prev_2 $D
LSERVE_LOG=lserve::model::llama=trace W rec $D
sed -e 's/\x1b\[[0-9;]*m//g' "$OUT/rec.txt" | grep -o "record_us=[0-9]*" | tail -20 | tr '\n' ' ' | tee -a "$L"; echo | tee -a "$L"
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
