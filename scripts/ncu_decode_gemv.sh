#!/usr/bin/env bash
# Nsight Compute on one decode layer of the Llama-3-8B batch-1 step with quantized weights: the x
# quantization and the four GEMVs of a layer (qkv, o, gate|up, down), for the open question of
# issue #14 (docs/benchmarks.md, session 16: neither loads in flight, nor launch gaps, nor the
# shared-memory reads of x bound the batch-1 quantized GEMVs). Prints per kernel: duration,
# memory / DRAM throughput, registers, achieved occupancy, issue and eligible warps, and the
# warp stall reasons (the raw page's `smsp__pcsamp_warps_issue_stalled_*` samples of `--set full`);
# the report goes to $OUT/ncu_<dtype>.ncu-rep, its details page to $OUT/ncu_<dtype>.txt. Profiles decode step 2 (LAUNCH_SKIP skips step 1's
# launches: 2 x 129 where x is quantized once per call, the `auto` formats Q4_K, Q5_K, Q6_K, Q5_1
# and int8; for the in-block formats, Q8_0, Q4_0, Q4_1, Q5_0, set LAUNCH_SKIP=129 LAUNCHES=4).
# Usage (on the GPU machine, lserve built and stripped on the development machine):
#   OUT=/tmp/o LSERVE=.gpu/x/lserve DTYPE=q4_k bash scripts/ncu_decode_gemv.sh
# Knobs: DTYPE (q4_k), CONTEXT (32k), LAUNCHES (8: x quantization + GEMV for 4 projections),
# LAUNCH_SKIP (258), NCU_TIMEOUT (300 s),
# LSERVE_CUDA_MMV passes through (auto: x quantized once for Q4_K, Q5_K, Q6_K, Q5_1, int8).
set -uo pipefail
OUT=${OUT:-/tmp/lserve-ncu}; mkdir -p "$OUT"
LSERVE=${LSERVE:-.gpu/lserve}; DTYPE=${DTYPE:-q4_k}; CONTEXT=${CONTEXT:-32k}; LAUNCHES=${LAUNCHES:-8}
LAUNCH_SKIP=${LAUNCH_SKIP:-258}
. "$(dirname "$0")/cuda_env.sh" >/dev/null
R="$OUT/ncu_$DTYPE"
timeout "${NCU_TIMEOUT:-300}" ncu -k regex:"matmul_gemv_${DTYPE}_m1|matmul_quantize_x_m1" -s "$LAUNCH_SKIP" -c "$LAUNCHES" \
  --set full -f -o "$R" \
  "$LSERVE" bench --device cuda --shape llama3-8b --head argmax --batch 1 --contexts "$CONTEXT" --sparse on \
  --token-budget 4096 --repeats 1 --dtype "$DTYPE" > "$R.log" 2>&1
echo "ncu rc $?"
ncu -i "$R.ncu-rep" > "$R.txt" 2>&1
grep -E "^  [a-z_0-9]+ \(|Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Issued Warp|Eligible Warps" "$R.txt" | head -100
ncu -i "$R.ncu-rep" --page raw 2>&1 | grep -E "^  [a-z_0-9]+ \(|pcsamp_warps_issue_stalled_[a-z_]+ " | grep -v "not_issued" | head -200
