#!/usr/bin/env bash
# Tensor parallelism on GPUs (docs/tensor-parallel.md), in the style of scripts/gpu_run.sh:
# binaries in .gpu/, results under $OUT, a short summary printed last.
# Expects in .gpu/ (built on the development machine; the GPU machine has no network):
#   lserve       the release binary (cargo build --release)
#   cuda_tp      the test binary of tests/cuda_tp.rs (cargo test --release --test cuda_tp --no-run;
#                copy the target/release/deps/cuda_tp-<hash> it names)
#   tp-test.gguf a random-weight model whose heads divide by 2 and 3 (33 MB; carry it in its own
#                call if the binaries fill the 64 MiB carry):
#                  lserve vocab-only --out /tmp/vocab.gguf
#                  cargo run --release --example tp_model -- /tmp/vocab.gguf .gpu/tp-test.gguf
#                TPMODEL overrides it (any llama-family file: its heads must divide by 3 for (b)).
# Parts:
#   ONE_GPU=1 (default): what a single GPU can check now —
#     (a) `generate` greedy ids on cuda without the flag and with --tensor-parallel-size 1: equal;
#     (b) `generate --tensor-parallel-size 3 --tp-devices 0,0,0 --tp-comm host` (three ranks on
#         GPU 0, host collective) against (a), and --tensor-parallel-size 2 likewise: equal ids
#         expected (a near tie may flip one: tests/cuda_tp.rs checks the margin);
#     (c) tests/cuda_tp.rs with LSERVE_TEST_MODEL=$TPMODEL (TP=1 through the TP constructor =
#         today's path; TP=3 / TP=2 on one GPU vs TP=1 up to near ties; the NCCL test skips with
#         fewer than 2 GPUs);
#     (d) a smoke bench: llama3-8b TP=2 on GPU 0 over the host collective at 4K (slow by design:
#         two host round trips per layer) against TP=1, with --profile.
#   TWO_GPU=1 (needs 2 GPUs and NCCL):
#     (e) tests/cuda_tp.rs with LSERVE_REQUIRE_NCCL=1 (TP=2 over NCCL vs TP=1, vs host; graphs on);
#     (f) `generate` greedy ids TP=2 over NCCL (GPUs 0 and 1) vs TP=1 on $TPMODEL, and on MODEL2
#         (a .gguf or HF folder with even head counts, e.g. Qwen2.5-0.5B-Instruct) when given;
#     (g) `lserve bench --tensor-parallel-size 2` for llama3-8b at 32K/128K dense+sparse against
#         TP=1 in the same call, and the 70B shape (80 layers, 64/8 heads, hidden 8192, ffn 28672:
#         bench shape llama3-70b, bf16 140 GB: TP=2 only) at 32K/128K, each with --profile so the
#         NCCL time per step shows as the all_reduce / all_gather rows.
set -uo pipefail
OUT=${OUT:-/tmp/lserve-tp-out}
mkdir -p "$OUT"
B=${B:-.gpu}
ONE_GPU=${ONE_GPU:-1}
TWO_GPU=${TWO_GPU:-0}
REPEATS=${REPEATS:-10}
BUDGET=${BUDGET:-4096}
. scripts/cuda_env.sh
export LSERVE_REQUIRE_CUDA=1
export LSERVE_CACHE=${LSERVE_CACHE:-/tmp/lserve-cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
TPMODEL=${TPMODEL:-$B/tp-test.gguf}
PROMPT=${PROMPT:-"Write a short story about a lighthouse keeper who finds a message in a bottle."}
ids() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["token_ids"])'; }
gen() { # gen NAME ARGS...: greedy generation of $PROMPT as JSON into $OUT/gen_NAME.json
  local name=$1; shift
  timeout 300 "$B/lserve" generate --device cuda --model "$TPMODEL" --prompt "$PROMPT" --max-tokens 48 --ignore-eos \
    --temperature 0 --output json "$@" > "$OUT/gen_$name.json" 2> "$OUT/gen_$name.err"
}
same() { # same A B: whether the two runs' token ids are equal
  local a b; a=$(ids < "$OUT/gen_$1.json" 2>/dev/null); b=$(ids < "$OUT/gen_$2.json" 2>/dev/null)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "equal"; else echo "DIFFER ($1: $a | $2: $b)"; fi
}

if [ "$ONE_GPU" = 1 ]; then
  gen noflag; gen tp1 --tensor-parallel-size 1
  gen tp3host --tensor-parallel-size 3 --tp-devices 0,0,0 --tp-comm host
  gen tp2host --tensor-parallel-size 2 --tp-devices 0,0 --tp-comm host
  LSERVE_TEST_MODEL="$TPMODEL" "$B/cuda_tp" --nocapture --test-threads 1 > "$OUT/cuda_tp.txt" 2>&1; c_tp=$?
  timeout 400 "$B/lserve" bench --device cuda --shape llama3-8b --contexts 4k --sparse off --repeats 3 --profile \
    > "$OUT/bench_tp1_4k.txt" 2>&1
  timeout 400 "$B/lserve" bench --device cuda --shape llama3-8b --contexts 4k --sparse off --repeats 3 --profile \
    --tensor-parallel-size 2 --tp-devices 0,0 --tp-comm host > "$OUT/bench_tp2host_4k.txt" 2>&1; c_host=$?
fi

if [ "$TWO_GPU" = 1 ]; then
  LSERVE_TEST_MODEL="$TPMODEL" LSERVE_REQUIRE_NCCL=1 "$B/cuda_tp" --nocapture --test-threads 1 \
    > "$OUT/cuda_tp_nccl.txt" 2>&1; c_nccl=$?
  [ -f "$OUT/gen_noflag.json" ] || gen noflag
  gen tp2nccl --tensor-parallel-size 2
  if [ -n "${MODEL2:-}" ]; then
    TPMODEL="$MODEL2" gen m2_tp1; TPMODEL="$MODEL2" gen m2_tp2 --tensor-parallel-size 2
  fi
  for tp in 1 2; do
    timeout 580 "$B/lserve" bench --device cuda --shape llama3-8b --contexts 32k,128k --sparse both \
      --repeats "$REPEATS" --token-budget "$BUDGET" --tensor-parallel-size $tp \
      --out-dir "$OUT/bench_8b_tp$tp" > "$OUT/bench_8b_tp$tp.txt" 2>&1
    timeout 300 "$B/lserve" bench --device cuda --shape llama3-8b --contexts 32k,128k --sparse both --repeats 3 \
      --token-budget "$BUDGET" --tensor-parallel-size $tp --profile > "$OUT/profile_8b_tp$tp.txt" 2>&1
  done
  timeout 580 "$B/lserve" bench --device cuda --shape llama3-70b --contexts 32k,128k --sparse both \
    --repeats "$REPEATS" --token-budget "$BUDGET" --tensor-parallel-size 2 \
    --out-dir "$OUT/bench_70b_tp2" > "$OUT/bench_70b_tp2.txt" 2>&1; c_70b=$?
  timeout 400 "$B/lserve" bench --device cuda --shape llama3-70b --contexts 32k,128k --sparse both --repeats 3 \
    --token-budget "$BUDGET" --tensor-parallel-size 2 --profile > "$OUT/profile_70b_tp2.txt" 2>&1
fi

echo "== $(cat "$OUT/gpu.txt")"
if [ "$ONE_GPU" = 1 ]; then
  echo "== (a) generate, no flag vs --tensor-parallel-size 1: $(same noflag tp1)"
  echo "== (b) TP=3 on GPU 0 (host collective) vs TP=1: $(same noflag tp3host)"
  echo "== (b) TP=2 on GPU 0 (host collective) vs TP=1: $(same noflag tp2host)"
  grep -h "error" "$OUT"/gen_*.err | head -5
  echo "== (c) tests/cuda_tp.rs (rc $c_tp): $(grep -E '^test result' "$OUT/cuda_tp.txt")"
  grep -E "FAILED|panicked|diverges|skipping" "$OUT/cuda_tp.txt" | head -10
  echo "== (d) llama3-8b 4K, TP=1 vs TP=2 on GPU 0 over the host (rc $c_host):"
  grep -E "^ *cuda" "$OUT/bench_tp1_4k.txt" "$OUT/bench_tp2host_4k.txt"
fi
if [ "$TWO_GPU" = 1 ]; then
  echo "== (e) tests/cuda_tp.rs with NCCL required (rc $c_nccl): $(grep -E '^test result' "$OUT/cuda_tp_nccl.txt")"
  grep -E "FAILED|panicked|diverges" "$OUT/cuda_tp_nccl.txt" | head -10
  echo "== (f) $TPMODEL greedy, TP=2 over NCCL (GPUs 0,1) vs TP=1: $(same noflag tp2nccl)"
  grep -h "tp_comm" -o "$OUT/gen_tp2nccl.json" >/dev/null && python3 -c 'import json,sys; print("   tp_comm:", json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["tp_comm"])' "$OUT/gen_tp2nccl.json"
  [ -n "${MODEL2:-}" ] && echo "== (f) $MODEL2 greedy, TP=2 vs TP=1: $(same m2_tp1 m2_tp2)"
  for tp in 1 2; do echo "== (g) llama3-8b TP=$tp:"; grep -E "^ *cuda|error" "$OUT/bench_8b_tp$tp.txt"; done
  echo "== (g) llama3-8b TP=2, collectives per step (rank 0, GPU time incl. waiting for the peer):"
  grep -E "^ *cuda|all_reduce|all_gather" "$OUT/profile_8b_tp2.txt" | head -12
  echo "== (g) 70B shape TP=2 (rc $c_70b):"; grep -E "^ *cuda|error" "$OUT/bench_70b_tp2.txt"
  grep -E "^ *cuda|all_reduce|all_gather" "$OUT/profile_70b_tp2.txt" | head -12
fi
