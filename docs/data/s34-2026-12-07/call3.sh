#!/usr/bin/env bash
# Session 34, GPU call 3 (after part.sh carried the four GGUF parts into /root/gm): the Gemma 3
# end-to-end tests on CUDA and wgpu (block-sparse prefill against the CPU reference among them),
# then Gemma 3 270M accuracy with block-sparse prefill, the antidiagonal estimate (the default)
# against the mean-query bound, beside decode selection alone (session 33's call2.sh): NIAH single
# and multi-key and ppl at 16K and 31K, 3 samples, decode budget 4096, ratio 0, pages 64/16, the
# sink page pinned; blocks sparse from position 4096.
BINS=.gpu/s34b/bins.tgz LIMIT=${LIMIT:-540} # lserve, backend_parity, gemma3 (the build of call2.sh)
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1 LSERVE_REQUIRE_WGPU=1
G=/root/gm/gemma-3-270m-q4_k_m.gguf
sha256sum $G | tee -a "$L"
LSERVE_TEST_GEMMA=$G E gemma 150 $B/gemma3 cuda_ wgpu_
A="accuracy -m $G --device cuda --tasks niah,niah_multikey,ppl --samples 3 --lengths 16k,31k --budgets 4096 --ratios 0 --pages 64/16 --pin-sink-page on"
E control 120 $B/lserve $A --out-dir $OUT/control
E ad2048 120 $B/lserve $A --prefill-budget 2048 --prefill-dense-below 4096 --out-dir $OUT/ad2048
E mb2048 120 $B/lserve $A --prefill-budget 2048 --prefill-dense-below 4096 --prefill-estimate mean_bound --out-dir $OUT/mb2048
for d in control ad2048 mb2048; do [ -f $OUT/$d/accuracy.md ] && cp $OUT/$d/accuracy.md $OUT/$d.md.txt && cp $OUT/$d/accuracy.json $OUT/$d.json.txt; done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
