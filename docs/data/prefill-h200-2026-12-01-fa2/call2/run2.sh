#!/usr/bin/env bash
# Session 8, call 2: prefill kernel v2 (FULL entries, ftz exp2, tile geometry in smem), default chunk 8192.
set -uo pipefail
B=/root/g9; mkdir -p $B; tar -xzf .gpu/g9/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $L
t0=$(date +%s); timeout 240 $B/backend_parity cuda::prefill > $OUT/parity.txt 2>&1; echo "parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity.txt | head -12 | tee -a $L
grep -A8 "panicked" $OUT/parity.txt | head -40 | tee -a $L
PB() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 300 $bin bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "^ *cuda|prefill_attention|matmul|rror" $OUT/$name.txt | head -24 | tee -a $L; }
PB p4k $B/lserve --contexts 1k --batch 1 --repeats 3 --warmup 1 --prefill 4096 --sparse both
PB p32k $B/lserve --contexts 1k --batch 1 --repeats 1 --warmup 1 --prefill 32768 --sparse both --profile
PB p128k_sparse $B/lserve --contexts 1k --batch 1 --repeats 1 --warmup 0 --prefill 131072 --sparse on --profile
PB p128k_dense $B/lserve --contexts 1k --batch 1 --repeats 1 --warmup 0 --prefill 131072 --sparse off --profile
PB dec_new $B/lserve --contexts 32k --batch 1,16 --repeats 5 --sparse on
PB dec_old $B/lserve.old --contexts 32k --batch 1,16 --repeats 5 --sparse on
timeout 300 python3 scripts/torch_prefill_bench.py --lengths 4096,32768,131072 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L
tail -8 $OUT/torch.txt | tee -a $L
timeout 200 ncu --kernel-name regex:prefill_attention_mma --launch-skip 100 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis \
  $B/lserve bench --device cuda --shape llama3-8b --contexts 1k --batch 1 --repeats 1 --warmup 0 --prefill 32768 --sparse off > $OUT/ncu.txt 2>&1; echo "ncu rc $?" | tee -a $L
grep -E "Throughput|Busy|Issue|Stall|Warp Cycles|Occupancy|Eligible|Duration|Registers|Pipe" $OUT/ncu.txt | head -60 | tee -a $L
cd $OUT && tar -czf all.tgz *.txt
