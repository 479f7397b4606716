#!/usr/bin/env bash
# Session 29, GPU call 2: three builds of the Hopper prefill, 32K dense prefill alternated in one
# call: `lserve` (call 1's loop-invariant descriptors), `lserve_4ch` (and the softmax's row maxima
# and sums as four chains, session 28's patch) and `lserve_poly` (and a quarter of the unmasked
# tiles' exponentials as a polynomial on the FMA pipe); the PyTorch anchor; Nsight Compute's
# per-instruction samples of `lserve`'s `_ws`. All three builds also have matmul_round_x four
# elements a thread (its parity first).
BINS=.gpu/s29/bins.tgz LIMIT=${LIMIT:-500}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::matmul cuda::out16
S="--contexts 4k --repeats 1 --prefill 32768 --sparse off"
C desc_32k $S --profile
LSERVE_BIN=$B/lserve_4ch C ch4_32k $S --profile
LSERVE_BIN=$B/lserve_poly C poly_32k $S --profile
left && { timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "== torch rc $?" | tee -a $L; tail -3 $OUT/torch.txt | tee -a $L; pack; }
for i in 2 3; do
  C desc_32k_$i $S
  LSERVE_BIN=$B/lserve_4ch C ch4_32k_$i $S
  LSERVE_BIN=$B/lserve_poly C poly_32k_$i $S
done
if left; then
  t0=$(date +%s)
  timeout 150 ncu --kernel-name regex:prefill_attention_wgmma --launch-skip 40 --launch-count 1 \
    --set full --import-source no -f -o /root/pws $B/lserve bench --device cuda --shape llama3-8b --head argmax --contexts 4k \
    --repeats 1 --prefill 16384 --sparse off > $OUT/ncu_run_ws.txt 2>&1
  echo "== ncu ws rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  ncu --import /root/pws.ncu-rep --page source --print-source sass --csv 2>&1 | gzip > $OUT/ncu_sass_ws.csv.gz
  ls -la $OUT/ncu_sass_ws.csv.gz | tee -a $L
fi
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"
(cd "$OUT" && tar -czf all.tgz ./*.txt ./*.gz 2>/dev/null)
