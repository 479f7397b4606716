#!/usr/bin/env bash
# Session 27, GPU call 2: where the plain wgmma prefill kernel and `_tma` spend their cycles
# (Nsight Compute, full set with per-SASS stall sampling, one 8,192-row launch of a 16K prefill:
# the second chunk, rows 8,192..16,383 over 16K keys), for call 1's 781 ms vs 1,286 ms at 32K.
BINS=.gpu/s27a/bins.tgz LIMIT=${LIMIT:-500} # lserve, backend_parity (call 1's)
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
# Compile the kernels once (the PTX cache) before profiling.
C warm --contexts 4k --repeats 1 --prefill 4096 --sparse off
for v in 1 3; do
  t0=$(date +%s)
  left && LSERVE_CUDA_PREFILL_WGMMA=$v timeout 150 ncu --kernel-name regex:prefill_attention_wgmma --launch-skip 40 --launch-count 1 \
    --set full --import-source no -f -o /root/pw$v $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k \
    --repeats 1 --prefill 16384 --sparse off > $OUT/ncu_run_v$v.txt 2>&1
  echo "== ncu v$v rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  left && ncu --import /root/pw$v.ncu-rep --page details --print-details all > $OUT/ncu_details_v$v.txt 2>&1
  left && ncu --import /root/pw$v.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass_v$v.txt 2>&1
  grep -E "Duration|Pipe Tensor|Issue Slots Busy|No Eligible|Active Warps Per" $OUT/ncu_details_v$v.txt | head -8 | tee -a $L
  pack
done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
