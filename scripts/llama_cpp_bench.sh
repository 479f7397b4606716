#!/usr/bin/env bash
# llama.cpp (CUDA) next to lserve on the same GPU in the same call: random-weight Llama-3-8B-shaped
# GGUFs (F16, Q8_0, Q4_K_M), llama-bench at batch 1 (tg128) with 0 and 32K tokens of context,
# flash attention on, then `lserve bench --device cuda --dtype <bf16|q8_0|q4_k|int8> --shape llama3-8b --contexts 32k,128k`
# with the llama.cpp numbers as its --compare anchors (issue #14).
#
# llama.cpp comes from the llama-cpp-python source package on PyPI (it vendors llama.cpp); the GPU
# machine has no network, so the source is fetched and slimmed HERE and carried:
#
#   1. here (network):  scripts/llama_cpp_bench.sh pack
#        pip download --no-deps --no-binary llama-cpp-python llama-cpp-python (0.3.36: 77 MB .tar.gz,
#        too big for one carry with its .git pack and vocab GGUFs), repacked without .git, the
#        models/*.gguf vocabularies, docs/ and media/ as .llama/src/llama.cpp.tar.xz (8.9 MB for
#        0.3.36), plus a cmake wheel (.llama/src/cmake-*.whl, 30 MB) used only if the GPU machine has
#        no cmake: delete it if the machine has one. .llama/ is git-ignored. The carry limit is
#        64 MiB for everything (working tree ~5 MB + .llama/src 39 MB + the lserve binary): if a
#        stripped lserve does not fit beside the wheel, carry the wheel in a first `build` call and
#        the binary in the `bench` call (a warm machine keeps .llama/build and .llama/cmake).
#   2. GPU machine:     run with carry [".llama/src", <the lserve binary's folder>] and
#        LSERVE=<path to a release lserve with cuda> scripts/llama_cpp_bench.sh build
#        scripts/llama_cpp_bench.sh models        (F16 GGUF written, llama-quantize to Q8_0, Q4_K_M)
#        scripts/llama_cpp_bench.sh bench         (OUT=$OUT: results land there)
#      Every stage is resumable and skips what exists: `build` builds in .llama/build, `models`
#      writes .llama/models (neither is carried, so a warm machine keeps them between calls); if a
#      call hits the 600 s limit, call the same stage again. `bench` makes missing models first;
#      without LSERVE set it runs llama-bench only. `all` = build + bench.
#
# Needs on the GPU machine: nvcc (CUDACXX, PATH or /usr/local/cuda/bin), a C++ compiler, python3
# with numpy (PyYAML optional: stubbed if missing), ~35 GB of disk in .llama/models (F16 16 GB,
# Q8_0 8.5 GB, Q4_K_M 4.9 GB). The random weights: one random f16 matrix per distinct shape, shared
# by all 32 layers (values do not change a speed measurement; quantization runs on the real layout).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
L=$ROOT/.llama
SRC=$L/src
BUILD=$L/build
MODELS=$L/models
OUT=${OUT:-$L/out}
mkdir -p "$L" "$OUT"
JOBS=$(nproc)
log() { echo "[llama_cpp_bench $(date +%H:%M:%S)] $*" | tee -a "$OUT/llama_cpp_bench.log"; }

pack() {
  mkdir -p "$SRC" "$L/dl"
  local sd
  sd=$(ls "$L"/dl/llama_cpp_python-*.tar.gz 2>/dev/null | head -1 || true)
  if [ -z "$sd" ]; then
    pip download --no-deps --no-binary llama-cpp-python llama-cpp-python -d "$L/dl"
    sd=$(ls "$L"/dl/llama_cpp_python-*.tar.gz | head -1)
  fi
  log "sdist $sd ($(du -h "$sd" | cut -f1))"
  rm -rf "$L/x" && mkdir -p "$L/x"
  tar xzf "$sd" -C "$L/x"
  local v
  v=$(ls -d "$L"/x/llama_cpp_python-*/vendor/llama.cpp)
  rm -rf "$v/.git" "$v/docs" "$v/media" "$v"/models/*.gguf
  tar -C "$(dirname "$v")" -cJf "$SRC/llama.cpp.tar.xz" llama.cpp
  basename "$sd" > "$SRC/SOURCE"
  rm -rf "$L/x"
  if ! ls "$SRC"/cmake-*.whl >/dev/null 2>&1; then
    pip download --no-deps --only-binary :all: --platform manylinux2014_x86_64 cmake -d "$SRC" || log "no cmake wheel (the GPU machine must have cmake)"
  fi
  log "carry .llama/src: $(du -sh "$SRC" | cut -f1) ($(ls "$SRC" | tr '\n' ' '))"
}

find_cmake() {
  if command -v cmake >/dev/null; then CMAKE=cmake; return; fi
  local w
  w=$(ls "$SRC"/cmake-*.whl 2>/dev/null | head -1 || true)
  [ -n "$w" ] || { log "error: no cmake on PATH and no carried cmake wheel in .llama/src"; exit 1; }
  mkdir -p "$L/cmake"
  [ -x "$L/cmake/cmake/data/bin/cmake" ] || python3 -m zipfile -e "$w" "$L/cmake"
  CMAKE=$L/cmake/cmake/data/bin/cmake
  chmod +x "$L"/cmake/cmake/data/bin/* || true
}

find_nvcc() {
  if [ -n "${CUDACXX:-}" ] && [ -x "$CUDACXX" ]; then return; fi
  CUDACXX=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -1 || true)
  [ -n "$CUDACXX" ] || { log "error: nvcc not found (set CUDACXX)"; exit 1; }
  export CUDACXX
  export PATH="$(dirname "$CUDACXX"):$PATH"
}

build() {
  [ -f "$SRC/llama.cpp.tar.xz" ] || { log "error: $SRC/llama.cpp.tar.xz missing (run pack here, carry .llama/src)"; exit 1; }
  if [ ! -f "$L/llama.cpp/CMakeLists.txt" ]; then
    tar -C "$L" -xJf "$SRC/llama.cpp.tar.xz"
  fi
  find_cmake
  find_nvcc
  log "cmake $($CMAKE --version | head -1), nvcc $($CUDACXX --version | tail -1), $JOBS jobs"
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    "$CMAKE" -S "$L/llama.cpp" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
      -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
      2>&1 | tail -20 | tee -a "$OUT/llama_cpp_bench.log"
  fi
  "$CMAKE" --build "$BUILD" --target llama-bench llama-quantize -j "$JOBS" > "$OUT/llama_build.log" 2>&1 || true
  { grep -E "error|Error|Built target" "$OUT/llama_build.log" || true; } | tail -20 | tee -a "$OUT/llama_cpp_bench.log"
  [ -x "$BUILD/bin/llama-bench" ] && [ -x "$BUILD/bin/llama-quantize" ] || { log "error: build incomplete"; exit 1; }
  log "built $BUILD/bin/llama-bench and llama-quantize"
}

make_models() {
  mkdir -p "$MODELS"
  if [ ! -f "$MODELS/f16.gguf" ]; then
    log "writing the random F16 Llama-3-8B GGUF"
    PYTHONPATH="$L/llama.cpp/gguf-py" python3 - "$MODELS/f16.gguf.tmp" <<'PY'
import sys, types
try:
    import yaml  # noqa: F401  (gguf.metadata imports it; unused here)
except ImportError:
    sys.modules["yaml"] = types.ModuleType("yaml")
import numpy as np
import gguf

D, L, FF, H, KV, HD, V = 4096, 32, 14336, 32, 8, 128, 128256
w = gguf.GGUFWriter(sys.argv[1], "llama")
w.add_context_length(131072)
w.add_embedding_length(D)
w.add_block_count(L)
w.add_feed_forward_length(FF)
w.add_rope_dimension_count(HD)
w.add_head_count(H)
w.add_head_count_kv(KV)
w.add_layer_norm_rms_eps(1e-5)
w.add_rope_freq_base(500000.0)
w.add_vocab_size(V)
w.add_file_type(1)  # MOSTLY_F16
w.add_tokenizer_model("no_vocab")
rng = np.random.default_rng(0)
mats = {}
def mat(rows, cols):
    if (rows, cols) not in mats:
        mats[(rows, cols)] = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)
    return mats[(rows, cols)]
ones = np.ones(D, dtype=np.float32)
w.add_tensor("token_embd.weight", mat(V, D))
for i in range(L):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", ones)
    w.add_tensor(p + "attn_q.weight", mat(H * HD, D))
    w.add_tensor(p + "attn_k.weight", mat(KV * HD, D))
    w.add_tensor(p + "attn_v.weight", mat(KV * HD, D))
    w.add_tensor(p + "attn_output.weight", mat(D, H * HD))
    w.add_tensor(p + "ffn_norm.weight", ones)
    w.add_tensor(p + "ffn_gate.weight", mat(FF, D))
    w.add_tensor(p + "ffn_up.weight", mat(FF, D))
    w.add_tensor(p + "ffn_down.weight", mat(D, FF))
w.add_tensor("output_norm.weight", ones)
w.add_tensor("output.weight", mat(V, D))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PY
    mv "$MODELS/f16.gguf.tmp" "$MODELS/f16.gguf"
  fi
  for q in Q8_0 Q4_K_M; do
    if [ ! -f "$MODELS/$q.gguf" ]; then
      log "llama-quantize F16 -> $q"
      "$BUILD/bin/llama-quantize" "$MODELS/f16.gguf" "$MODELS/$q.gguf.tmp" "$q" "$JOBS" > "$OUT/quantize_$q.log" 2>&1 \
        || { tail -20 "$OUT/quantize_$q.log"; exit 1; }
      mv "$MODELS/$q.gguf.tmp" "$MODELS/$q.gguf"
    fi
  done
  ls -la "$MODELS" | tee -a "$OUT/llama_cpp_bench.log"
}

bench() {
  [ -x "$BUILD/bin/llama-bench" ] || { log "error: run build first"; exit 1; }
  make_models
  echo "label,context,ms_per_token" > "$OUT/llama_cpp.csv"
  for m in f16 Q8_0 Q4_K_M; do
    log "llama-bench $m: tg128 at depth 0 and 32768, flash attention on, all layers on the GPU"
    "$BUILD/bin/llama-bench" -m "$MODELS/$m.gguf" -ngl 99 -fa 1 -p 0 -n 128 -d 0,32768 -r 3 -o json \
      > "$OUT/llama_bench_$m.json" 2> "$OUT/llama_bench_$m.err" || { tail -20 "$OUT/llama_bench_$m.err"; exit 1; }
    python3 - "$OUT/llama_bench_$m.json" "$m" "$OUT/llama_cpp.csv" <<'PY' | tee -a "$OUT/llama_cpp_bench.log"
import json, sys
with open(sys.argv[3], "a") as csv:
    for r in json.load(open(sys.argv[1])):
        d, ms = r.get("n_depth", 0), 1000 / r["avg_ts"]
        print(f"llama.cpp {sys.argv[2]:7s} depth {d:6d}: {r['avg_ts']:.2f} tok/s = {ms:.2f} ms/token")
        csv.write(f"llama.cpp {sys.argv[2]},{d},{ms:.3f}\n")
PY
  done
  if [ -n "${LSERVE:-}" ]; then
    source "$ROOT/scripts/cuda_env.sh"
    for d in bf16 q8_0 q4_k int8; do
      log "lserve bench --device cuda --dtype $d --shape llama3-8b --contexts 32k,128k"
      "$LSERVE" bench --device cuda --dtype "$d" --shape llama3-8b --contexts 32k,128k \
        --compare "$OUT/llama_cpp.csv" --out-dir "$OUT/lserve_$d" 2>&1 | tail -15 | tee -a "$OUT/llama_cpp_bench.log" || true
    done
  else
    log "LSERVE not set: lserve bench skipped"
  fi
}

case "${1:-}" in
  pack) pack ;;
  build) build ;;
  models) make_models ;;
  bench) bench ;;
  all) build; bench ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
