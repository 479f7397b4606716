#!/usr/bin/env bash
# Session 14, GPU call 2: where the wgmma prefill's cycles go. Nsight Compute with the full set and
# per-SASS-instruction stall sampling of one plain-variant launch (16K prefill, the 9th launch),
# exported as CSV; and the parity seed that failed in call 1 replayed on both variants.
BINS=.gpu/s14a/bins.tgz LIMIT=${LIMIT:-420}
. scripts/gpu_call_lib.sh
F="cuda::prefill_attention::kv_f16_hd128"
for v in 1 2; do LSERVE_TEST_SEED=1796256535111391395 LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=$v P seed_v$v 200 $F; done
for v in 1 2; do LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=$v P again_v$v 100 $F; done
t0=$(date +%s)
LSERVE_CUDA_PREFILL_WGMMA=1 timeout 200 ncu --kernel-name regex:prefill_attention_wgmma --launch-skip 8 --launch-count 1 --set full \
  --import-source no -f -o /root/pw1 $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k --repeats 1 \
  --prefill 16384 --sparse off > $OUT/ncu_full_run.txt 2>&1
echo "== ncu full rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
ncu --import /root/pw1.ncu-rep --page details --print-details all > $OUT/ncu_details.txt 2>&1; echo "details rc $?" | tee -a $L
ncu --import /root/pw1.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass.txt 2>&1; echo "sass rc $?" | tee -a $L
head -c 600 $OUT/ncu_sass.txt | tee -a $L; echo | tee -a $L
grep -iE "tensor|Pipe|stall|Issue|Eligible" $OUT/ncu_details.txt | head -60 | tee -a $L
pack
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
