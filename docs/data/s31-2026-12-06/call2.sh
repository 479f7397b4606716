#!/usr/bin/env bash
# Session 31, GPU call 2: the split-KV merge folded into the decode attention (the last split's
# block merges; the separate merge launch is gone), q loaded before the key list, the register GEMVs
# addressing whole row groups by pointer steps, and the norms' weights loaded before their
# block reduction (s31b), against fe524b4 (s31a) in the same call. Correctness first: decode
# attention and page_select parity (multi-split merges, x8 outs), the two-pass argmax, the
# matmuls in the default modes, cuda_e2e; then 8B 32K sparse batch-1 steps alternated old/new;
# then Nsight Compute's per-kernel times of one Q4_K step and one decode attention launch in full.
BINS=.gpu/s31b/bins.tgz LIMIT=${LIMIT:-440} # lserve, backend_parity, cuda_e2e (new)
. scripts/gpu_call_lib.sh
OLD=/root/s31a; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s31a/bins.tgz -C $OLD
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 230 cuda::sparse_decode_attention:: cuda::page_select:: cuda::argmax cuda::sample cuda::matmul:: cuda::add_rmsnorm cuda::rmsnorm cuda_mmv_bulk:: cuda_mmv_bulkf_loop::
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
for r in 1 2; do
  LSERVE_BIN=$OLD/lserve C q4k_old$r --dtype q4_k $S
  C q4k_new$r --dtype q4_k $S
done
LSERVE_BIN=$OLD/lserve C i8_old --dtype int8 $S
C i8_new --dtype int8 $S
E e2e 150 $B/cuda_e2e
# Splits per (sequence, head chunk): the default rounds the wave up (50 on an H100: 400 blocks
# for 396 slots, 3 blocks an SM); 49 is one wave.
for n in 49 25 100; do LSERVE_CUDA_DECODE_SPLITS=$n C q4k_splits$n --dtype q4_k $S; done
t0=$(date +%s)
left && timeout 120 ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
  $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 32k --sparse on \
  --token-budget 4096 --repeats 2 --warmup 1 --warmup-ms 0 > $OUT/ncu_step.csv 2> $OUT/ncu_step.err
echo "== ncu rc $? $(( $(date +%s)-t0 ))s" | tee -a $L; gzip -f $OUT/ncu_step.csv; pack
t0=$(date +%s)
left && timeout 100 ncu -k regex:sparse_decode_attention_mma -s 40 -c 1 --set full -f -o /root/sda \
  $B/lserve bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 32k --sparse on \
  --token-budget 4096 --repeats 2 --warmup 1 --warmup-ms 0 > $OUT/ncu_sda_run.txt 2>&1
echo "== ncu sda rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
[ -f /root/sda.ncu-rep ] && ncu -i /root/sda.ncu-rep --page details --print-details all > $OUT/ncu_sda.txt 2>&1
[ -f /root/sda.ncu-rep ] && ncu -i /root/sda.ncu-rep --page raw 2>&1 | grep -E "pcsamp_warps_issue_stalled_[a-z_]+ " | grep -v not_issued | sort -k3 -n -r | head -20 > $OUT/ncu_sda_stalls.txt
[ -f /root/sda.ncu-rep ] && ncu -i /root/sda.ncu-rep --page source --csv --print-source sass > $OUT/ncu_sda_src.csv 2>/dev/null; gzip -f $OUT/ncu_sda_src.csv 2>/dev/null
grep -E "Duration|Achieved Occupancy|Eligible Warps|Issued Warp|DRAM Throughput|Registers Per|Grid Size" $OUT/ncu_sda.txt 2>/dev/null | head -10 | tee -a $L; pack
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
