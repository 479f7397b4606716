#!/usr/bin/env bash
# Session 29, GPU call 1: the Hopper prefill's wgmma descriptors as loop invariants (uniform
# registers, the stage a compile-time constant in each copy of the unmasked burst: the hot loop
# 548 -> ~441 instructions a tile in the local SASS) against the committed tree (lserve_base) in
# the same call; parity of every Hopper variant, memcheck of `_ws`, the PyTorch anchor, #11's
# rows, and Nsight Compute on the new `_ws`.
BINS=.gpu/s29/bins.tgz LIMIT=${LIMIT:-500}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 240 cuda::prefill_attention cuda_prefill_ws cuda_prefill_tma cuda_prefill_plain
E memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" cuda_prefill_ws::prefill_attention::kv_bf16_hd128 --test-threads 1
S="--contexts 4k --repeats 1 --prefill 32768"
C new_32k $S --sparse off --profile
LSERVE_BIN=$B/lserve_base C base_32k $S --sparse off --profile
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; pack; }
C new_32k_2 $S --sparse off
LSERVE_BIN=$B/lserve_base C base_32k_2 $S --sparse off
C new_32k_3 $S --sparse off
LSERVE_BIN=$B/lserve_base C base_32k_3 $S --sparse off
C new_32k_sp $S --sparse on
LSERVE_BIN=$B/lserve_base C base_32k_sp $S --sparse on
C new_32k_bs2k $S --sparse on --prefill-budget 2048 --prefill-dense-below 4096
C new_4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
LSERVE_BIN=$B/lserve_base C base_4k --contexts 4k --repeats 2 --prefill 4096 --sparse off
if left; then
  t0=$(date +%s)
  timeout 150 ncu --kernel-name regex:prefill_attention_wgmma --launch-skip 40 --launch-count 1 \
    --set full --import-source no -f -o /root/pws $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k \
    --repeats 1 --prefill 16384 --sparse off > $OUT/ncu_run_ws.txt 2>&1
  echo "== ncu ws rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  ncu --import /root/pws.ncu-rep --page details --print-details all > $OUT/ncu_details_ws.txt 2>&1
  ncu --import /root/pws.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass_ws.txt 2>&1
  gzip -f $OUT/ncu_sass_ws.txt
  grep -E "Duration|Pipe Tensor|Issue Slots Busy|No Eligible|Active Warps Per|Warp Cycles Per Issued" $OUT/ncu_details_ws.txt | head -8 | tee -a $L
fi
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
