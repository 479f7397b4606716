#!/usr/bin/env bash
# Session 33, GPU call 2 (after the four GGUF parts were carried in back-to-back calls): Gemma 3
# 270M accuracy with block-sparse prefill, the antidiagonal estimate (the new default) against the
# mean-query bound, beside dense and decode selection alone (same settings as session 10's call 4,
# docs/sparse-attention.md "Block-sparse prefill"): NIAH single and multi-key and ppl at 16K and
# 31K, 3 samples, decode budget 4096, ratio 0, pages 64/16, the sink page pinned; blocks sparse
# from position 4096.
BINS=.gpu/s33a/bins.tgz LIMIT=${LIMIT:-520}
. scripts/gpu_call_lib.sh
G=.gpu/gemma/gemma-3-270m-q4_k_m.gguf
[ -f $G ] || cat $G.part0? > $G
ls -la $G | tee -a "$L"
A="accuracy -m $G --device cuda --tasks niah,niah_multikey,ppl --samples 3 --lengths 16k,31k --budgets 4096 --ratios 0 --pages 64/16 --pin-sink-page on"
E control 150 $B/lserve $A --out-dir $OUT/control
E ad4096 150 $B/lserve $A --prefill-budget 4096 --prefill-dense-below 4096 --out-dir $OUT/ad4096
E mb4096 150 $B/lserve $A --prefill-budget 4096 --prefill-dense-below 4096 --prefill-estimate mean_bound --out-dir $OUT/mb4096
E ad2048 150 $B/lserve $A --prefill-budget 2048 --prefill-dense-below 4096 --out-dir $OUT/ad2048
for d in control ad4096 mb4096 ad2048; do [ -f $OUT/$d/accuracy.md ] && cp $OUT/$d/accuracy.md $OUT/$d.md.txt && cp $OUT/$d/accuracy.json $OUT/$d.json.txt; done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
