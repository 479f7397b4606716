#!/usr/bin/env bash
# Session 14, GPU call 4 (call 3 replayed call 1's failing parity seed on all three CUDA prefill
# kernels: all gave the same value, so the test's q rounding, now matched, not a kernel): the
# wgmma prefill with cheap staging (page-table loads a tile ahead, zero-fill cp.async, no branch
# per pass). Parity for both variants over several seeds, 32K dense profiled alternated, the
# PyTorch anchor, unprofiled 4K/32K dense and sparse, 128K sparse, and the per-instruction profile
# again. Binaries in .gpu/s14b/bins.tgz.
BINS=.gpu/s14b/bins.tgz LIMIT=${LIMIT:-480}
. scripts/gpu_call_lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$L"
F="cuda::prefill_attention::kv_bf16_hd128 cuda::prefill_attention::kv_f16_hd128"
LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=1 P pc_v1 200 $F
for s in 1796256535111391395 21 22 23 24; do for v in 1 2; do
  LSERVE_TEST_SEED=$s LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=$v P pc_v${v}_s$s 60 $F; done; done
for r in 1 2; do for v in 1 2; do
  LSERVE_CUDA_PREFILL_WGMMA=$v C pf32k_v${v}_$r --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
done; done
left && { timeout 90 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
for v in 1 2; do LSERVE_CUDA_PREFILL_WGMMA=$v C pf_v$v --contexts 4k --repeats 1 --prefill 32768 --sparse both; done
for v in 1 2; do LSERVE_CUDA_PREFILL_WGMMA=$v C pf4k_v$v --contexts 4k --repeats 1 --prefill 4096 --sparse both; done
LSERVE_CUDA_PREFILL_WGMMA=1 C pf128k_v1 --contexts 4k --repeats 1 --prefill 131072 --sparse on
t0=$(date +%s)
left && LSERVE_CUDA_PREFILL_WGMMA=1 timeout 120 ncu --kernel-name regex:prefill_attention_wgmma --launch-skip 8 --launch-count 1 --set full \
  --import-source no -f -o /root/pw2 $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k --repeats 1 \
  --prefill 16384 --sparse off > $OUT/ncu_full_run.txt 2>&1
echo "== ncu full rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
left && ncu --import /root/pw2.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass.txt 2>&1
left && ncu --import /root/pw2.ncu-rep --page details --print-details all > $OUT/ncu_details.txt 2>&1
grep -E "Duration|Pipe Tensor Cycles|Issue Active" $OUT/ncu_details.txt | head -5 | tee -a $L
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
