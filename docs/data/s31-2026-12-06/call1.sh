#!/usr/bin/env bash
# Session 31, GPU call 1 — NOT RUN (no machine; call 2 ran its correctness part) (commit fe524b4; session 30 call 4 rerun): correctness of the final tree on the GPU (every
# matmul parity test in the default modes, where int8 rows and packed Q8_0 now stream their
# rows by bulk copies; the four bulk modes; the two-pass argmax on CUDA and on wgpu; cuda_e2e),
# then the 8B 32K sparse batch-1 step in the default against the register kernels (regf) in the
# same binary, the bulk:2 launch that failed before the shared-memory attribute fix, and Nsight
# Compute's per-kernel durations of one Q4_K step (the argmax's two passes).
BINS=.gpu/s31a/bins.tgz LIMIT=${LIMIT:-270} # lserve, backend_parity, cuda_e2e
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$L"
P par 200 cuda::matmul:: cuda_mmv_bulk:: cuda_mmv_bulk_loop:: cuda_mmv_bulkf:: cuda_mmv_bulkf_loop:: cuda::argmax cuda::sample
LSERVE_REQUIRE_WGPU=1 P par_wgpu 60 wgpu::argmax wgpu::sample
E e2e 150 $B/cuda_e2e
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
Q() { local name=$1 mode=$2; shift 2; LSERVE_CUDA_MMV=$mode C "$name" "$@" $S; }
Q q8 auto --dtype q8_0
Q q8_regf regf --dtype q8_0
Q i8 auto --dtype int8
Q i8_regf regf --dtype int8
Q q4k_bulk2 bulk:2 --dtype q4_k
Q q4k auto --dtype q4_k
t0=$(date +%s)
left && timeout 150 ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
  $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 32k --sparse on \
  --token-budget 4096 --repeats 2 --warmup 1 --warmup-ms 0 > $OUT/ncu_step.csv 2> $OUT/ncu_step.err
echo "== ncu rc $? $(( $(date +%s)-t0 ))s" | tee -a $L; gzip -f $OUT/ncu_step.csv; pack
# The decode attention's cycles (16.4 us a layer in call 2, 17% of the Q4_K step): one launch of
# the second step, full sections and the warp stall samples.
t0=$(date +%s)
left && timeout 120 ncu -k regex:sparse_decode_attention_mma -s 40 -c 1 --set full -f -o /root/sda \
  $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 32k --sparse on \
  --token-budget 4096 --repeats 2 --warmup 1 --warmup-ms 0 > $OUT/ncu_sda_run.txt 2>&1
echo "== ncu sda rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
left && ncu -i /root/sda.ncu-rep --page details --print-details all > $OUT/ncu_sda.txt 2>&1
left && ncu -i /root/sda.ncu-rep --page raw 2>&1 | grep -E "pcsamp_warps_issue_stalled_[a-z_]+ " | grep -v not_issued | sort -k3 -n -r | head -20 > $OUT/ncu_sda_stalls.txt
grep -E "Duration|Achieved Occupancy|Eligible Warps|Issued Warp|DRAM Throughput|Registers Per" $OUT/ncu_sda.txt | head -8 | tee -a $L; pack
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
