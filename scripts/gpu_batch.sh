#!/usr/bin/env bash
# Batched decode, prefill and accuracy of the CUDA path on a GPU machine, in one call, with the
# PyTorch anchors measured in the same call (docs/benchmarks.md). Expects in .gpu/ (see
# docs/backends.md, "Running on a GPU machine"): lserve, backend_parity, cuda_e2e (stripped), and
# doc.txt (the scored text: the start of Debian's GPL-3, `head -c 17000`). The default model is
# looked up in $LSERVE_CACHE (cuda_env.sh); when /root/smol.part.* exist (carried in earlier
# calls) they are joined into it first.
# Parts (1 = on): CHECK (CUDA parity + e2e + memcheck of page_select/matmul), ANCHOR (PyTorch
# decode batch steps + prefill), DECODE (lserve batched decode sweep), PREFILL (lserve prefill),
# PROFILE (per-kernel times at 32K batch 16), SCORE (mean NLL on CUDA).
set -uo pipefail
OUT=${OUT:-/tmp/lserve-gpu-out}; mkdir -p "$OUT"
B=${B:-.gpu}
export LSERVE_CACHE=${LSERVE_CACHE:-/root/lserve-cache}
. scripts/cuda_env.sh
export LSERVE_REQUIRE_CUDA=1
m=$LSERVE_CACHE/models/smollm2-135m
if ls /root/smol.part.* >/dev/null 2>&1 && [ ! -f $m/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  mkdir -p $m && cat /root/smol.part.* > $m/SmolLM2-135M-Instruct.Q4_1.gguf
fi
md5sum $m/*.gguf > "$OUT/model_md5.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
run() { local name=$1 t=$2; shift 2; echo "== $name" ; timeout "$t" "$@" > "$OUT/$name.txt" 2>&1; echo "rc $?" >> "$OUT/$name.txt"; }
SHAPE=${SHAPE:-llama3-8b}
if [ "${CHECK:-1}" = 1 ]; then
  run parity_cuda 240 "$B/backend_parity" cuda::
  run e2e_cuda 240 "$B/cuda_e2e" --nocapture
  run memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" cuda::page_select --test-threads 1
fi
if [ "${ANCHOR:-1}" = 1 ] && python3 -c "import torch" 2>/dev/null; then
  run torch_decode 200 python3 scripts/torch_decode_bench.py --shape "$SHAPE" --contexts "${TORCH_CONTEXTS:-32768}" \
    --batch "${TORCH_BATCH:-1,8,16}" --csv "$OUT/torch_decode.csv"
  run torch_prefill 200 python3 scripts/torch_prefill_bench.py --shape "$SHAPE" --lengths "${PREFILL_LENGTHS:-4096,32768}" \
    --csv "$OUT/torch_prefill.csv"
fi
bench=("$B/lserve" bench --device cuda --shape "$SHAPE" --token-budget 4096 --head argmax)
if [ "${DECODE:-1}" = 1 ]; then
  run decode_32k 200 "${bench[@]}" --contexts 32k --batch "${BATCH_32K:-1,2,4,8,16,32}" --sparse on --repeats 10 
  run decode_128k 200 "${bench[@]}" --contexts 128k --batch "${BATCH_128K:-1,4,8,12}" --sparse on --repeats 8 
  run decode_dense 120 "${bench[@]}" --contexts 32k --batch 1,16 --sparse off --repeats 8
fi
[ "${PREFILL:-1}" = 1 ] && run prefill 240 "${bench[@]}" --contexts 4k --batch 1 --sparse both --repeats 3 --prefill "${PREFILL_TOKENS:-32768}"
[ "${PROFILE:-1}" = 1 ] && run profile 120 "${bench[@]}" --contexts 32k --batch 16 --sparse on --repeats 3 --profile
if [ "${SCORE:-1}" = 1 ]; then
  run score_cuda 120 "$B/lserve" score --device cuda --file "$B/doc.txt" --output json
  run score_cuda_decode 200 "$B/lserve" score --device cuda --file "$B/doc.txt" --output json --decode-after 3000
fi
for f in "$OUT"/*.txt; do echo "===== $(basename "$f")"; grep -E "test result|FAILED|panicked|ERROR SUMMARY|rc [0-9]|cuda|mean_nll|^ +[0-9]|tok|ms" "$f" | head -40; done
