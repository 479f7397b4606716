#!/usr/bin/env bash
# Session 10, GPU set 3: the merged tree (wgpu batched GEMV + wgpu decode attention + tensor
# parallelism) against the previous binary: wgpu parity on NVIDIA, wgpu batch 1/8 decode (+ the
# variants' env vars, + profile), CUDA parity of the ops the merges touched, CUDA decode
# no-regress, 8-bit KV sparse decode profile.
set -uo pipefail
B=/root/s10c; mkdir -p $B; tar -xzf .gpu/c3/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
M=$LSERVE_CACHE/models/smollm2-135m; mkdir -p $M
[ -f $M/SmolLM2-135M-Instruct.Q4_1.gguf ] || cat /root/smol.part0 /root/smol.part1 .gpu/c3/smol.part2 > $M/SmolLM2-135M-Instruct.Q4_1.gguf
ls -la $M
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
t0=$(date +%s); LSERVE_REQUIRE_WGPU=1 timeout 90 $B/backend_parity wgpu::matmul wgpu::sparse_decode wgpu::embed > $OUT/parity_wgpu.txt 2>&1; echo "wgpu parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_wgpu.txt | head -12 | tee -a $L; grep -A8 "panicked" $OUT/parity_wgpu.txt | head -30 | tee -a $L
t0=$(date +%s); timeout 60 $B/backend_parity cuda::embed > $OUT/parity_cuda.txt 2>&1; echo "cuda parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_cuda.txt | head -12 | tee -a $L; grep -A8 "panicked" $OUT/parity_cuda.txt | head -30 | tee -a $L
W() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 200 $bin bench --device wgpu --shape llama3-8b --dtype f16 --kv-dtype f16 --token-budget 4096 --head argmax --sparse on "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -24 | tee -a $L; }
W w_old $B/lserve-old --contexts 32k --batch 1,8 --repeats 5
W w_new $B/lserve --contexts 32k --batch 1,8,16 --repeats 5
LSERVE_WGPU_GEMV_BATCH_ROWS=32 W w_r32 $B/lserve --contexts 32k --batch 8 --repeats 5
LSERVE_WGPU_DECODE_WORKGROUPS=2048 W w_wg2048 $B/lserve --contexts 32k --batch 8 --repeats 5
W w_new_prof $B/lserve --contexts 32k --batch 8 --repeats 3 --profile
PB() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 200 $bin bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -24 | tee -a $L; }
PB c_old $B/lserve-old --contexts 32k --batch 1,16 --repeats 5 --sparse on
PB c_new $B/lserve --contexts 32k --batch 1,16 --repeats 5 --sparse on
if [ "${TP:-0}" = 1 ]; then
  # Tensor parallelism on one GPU (docs/tensor-parallel.md): greedy ids without the flag, TP=1,
  # and TP=2 / TP=3 with every rank on GPU 0 over the host collective; then tests/cuda_tp.rs.
  TPM=$B/tp-test.gguf; P="Write a short story about a lighthouse keeper who finds a message in a bottle."
  gen() { local name=$1; shift; timeout 120 $B/lserve generate --device cuda --model $TPM --prompt "$P" --max-tokens 48 \
    --ignore-eos --temperature 0 --output json "$@" > $OUT/tp_gen_$name.json 2> $OUT/tp_gen_$name.err; echo "tp gen $name rc $?" | tee -a $L; }
  gen noflag; gen tp1 --tensor-parallel-size 1
  gen tp2host --tensor-parallel-size 2 --tp-devices 0,0 --tp-comm host
  gen tp3host --tensor-parallel-size 3 --tp-devices 0,0,0 --tp-comm host
  gen tp1nccl --tensor-parallel-size 1 --tp-comm nccl
  python3 - <<PY | tee -a $L
import json
ids = {}
for n in ["noflag", "tp1", "tp2host", "tp3host", "tp1nccl"]:
    try: ids[n] = json.loads(open(f"$OUT/tp_gen_{n}.json").read().strip().splitlines()[-1])["token_ids"]
    except Exception as e: ids[n] = f"error {e}"
for n in ids: print("tp", n, "equal to noflag:", ids[n] == ids["noflag"], (ids[n][:12] if isinstance(ids[n], list) else ids[n]))
PY
  tail -2 $OUT/tp_gen_tp1nccl.err | tee -a $L
  t0=$(date +%s); LSERVE_TEST_MODEL=$TPM timeout 90 $B/cuda_tp --nocapture --test-threads 1 > $OUT/tp_cuda_tp.txt 2>&1; echo "cuda_tp rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -E "test result|FAILED|panicked|skipped|diverge|margin" $OUT/tp_cuda_tp.txt | head -12 | tee -a $L
fi
# NIAH per KV dtype on CUDA (#13 item 4), the default model (reassembled from the carried parts).
if [ "${NIAH:-0}" = 1 ]; then
  for kv in bf16 int8 fp8; do t0=$(date +%s)
    timeout 50 $B/lserve niah --device cuda --kv-dtype $kv --lengths 1k,2k,4k,8k --depths 0,25,50,75,100 --sparse both \
      --head-pattern patterns/smollm2-135m.toml --streaming-ratio 0.5 --token-budget 1024 --dense-below 0 \
      --out-dir $OUT/niah_$kv > $OUT/niah_$kv.txt 2>&1; echo "== niah $kv rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
    grep -vE "^\s*$" $OUT/niah_$kv.txt | tail -14 | tee -a $L
    cp $OUT/niah_$kv/results.json $OUT/niah_$kv.json 2>/dev/null
  done
fi
cd $OUT && tar -czf all.tgz *.txt *.json 2>/dev/null; ls | wc -l
