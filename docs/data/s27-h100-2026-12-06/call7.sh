#!/usr/bin/env bash
# Session 27, GPU call 7: Nsight Compute on `_tma` (the default now), as call 2 did for the plain
# kernel: full set with per-SASS stall sampling, one 8,192-row launch of a 16K prefill (the second
# chunk, rows 8,192..16,383 over 16K keys).
BINS=.gpu/s27e/bins.tgz LIMIT=${LIMIT:-300}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
t0=$(date +%s)
timeout 280 ncu --kernel-name regex:prefill_attention_wgmma --launch-skip 40 --launch-count 1 \
  --set full --import-source no -f -o /root/pwt $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k \
  --repeats 1 --prefill 16384 --sparse off > $OUT/ncu_run_tma.txt 2>&1
echo "== ncu tma rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
ncu --import /root/pwt.ncu-rep --page details --print-details all > $OUT/ncu_details_tma.txt 2>&1
ncu --import /root/pwt.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass_tma.txt 2>&1
gzip -k $OUT/ncu_sass_tma.txt
grep -E "Duration|Pipe Tensor|Issue Slots Busy|No Eligible|Active Warps Per|Warp Cycles Per Issued" $OUT/ncu_details_tma.txt | head -8 | tee -a $L
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
