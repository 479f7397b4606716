#!/usr/bin/env bash
# Session 14, GPU call 1: the wgmma prefill's `_pipe` variant (a tile's softmax overlapping the
# previous tile's P V, FlashAttention-3's intra-warpgroup overlap) against the plain one: parity,
# 32K dense prefill profiled (alternated), the PyTorch anchor, unprofiled 32K dense/sparse, and
# Nsight Compute of both kernels. Binaries in .gpu/s14a/bins.tgz.
BINS=.gpu/s14a/bins.tgz LIMIT=${LIMIT:-480}
. scripts/gpu_call_lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$L"
F="cuda::prefill_attention::kv_bf16_hd128 cuda::prefill_attention::kv_f16_hd128"
LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=2 P pc_pipe 200 $F
LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=1 P pc_plain 100 $F
for r in 1 2; do for v in 1 2; do
  LSERVE_CUDA_PREFILL_WGMMA=$v C pf32k_v${v}_$r --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
done; done
left && { timeout 90 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
for v in 1 2; do LSERVE_CUDA_PREFILL_WGMMA=$v C pf_v$v --contexts 4k --repeats 1 --prefill 32768 --sparse both; done
LSERVE_CUDA_PREFILL_WGMMA=2 C pf4k_v2 --contexts 4k --repeats 1 --prefill 4096 --sparse both
LSERVE_CUDA_PREFILL_WGMMA=2 C pf128k_v2 --contexts 4k --repeats 1 --prefill 131072 --sparse on
N() { local name=$1; shift; left || { echo "skip $name" | tee -a $L; return; }; local t0=$(date +%s)
  timeout 150 ncu --kernel-name regex:prefill_attention_wgmma --launch-skip 8 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k --repeats 1 --prefill 16384 --sparse off > $OUT/$name.txt 2>&1
  echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "Duration|SM Frequency|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Registers|Achieved Occupancy|No Eligible|Issued Warp|Warp Cycles Per Issued" $OUT/$name.txt | head -16 | tee -a $L; pack; }
LSERVE_CUDA_PREFILL_WGMMA=1 N ncu_v1
LSERVE_CUDA_PREFILL_WGMMA=2 N ncu_v2
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
