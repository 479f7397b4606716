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
t0=$(date +%s); LSERVE_REQUIRE_WGPU=1 timeout 240 $B/backend_parity wgpu::matmul wgpu::sparse_decode wgpu::embed > $OUT/parity_wgpu.txt 2>&1; echo "wgpu parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_wgpu.txt | head -12 | tee -a $L; grep -A8 "panicked" $OUT/parity_wgpu.txt | head -30 | tee -a $L
t0=$(date +%s); timeout 200 $B/backend_parity cuda::embed cuda::sparse_decode > $OUT/parity_cuda.txt 2>&1; echo "cuda parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_cuda.txt | head -12 | tee -a $L; grep -A8 "panicked" $OUT/parity_cuda.txt | head -30 | tee -a $L
W() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 200 $bin bench --device wgpu --shape llama3-8b --dtype f16 --kv-dtype f16 --token-budget 4096 --head argmax --sparse on "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -24 | tee -a $L; }
W w_old $B/lserve-old --contexts 32k --batch 1,8 --repeats 5
W w_new $B/lserve --contexts 32k --batch 1,2,4,8,16 --repeats 5
${WGPU_VARIANTS:-true}
W w_old2 $B/lserve-old --contexts 32k --batch 1,8 --repeats 5
W w_new2 $B/lserve --contexts 32k --batch 1,8 --repeats 5
W w_new_prof $B/lserve --contexts 32k --batch 1,8 --repeats 3 --profile
PB() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 200 $bin bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -24 | tee -a $L; }
PB c_old $B/lserve-old --contexts 32k,128k --batch 1,16 --repeats 5 --sparse on
PB c_new $B/lserve --contexts 32k,128k --batch 1,16 --repeats 5 --sparse on
PB kv_bf16_prof $B/lserve --contexts 128k --batch 1 --repeats 3 --sparse on --kv-dtype bf16 --profile
PB kv_int8_prof $B/lserve --contexts 128k --batch 1 --repeats 3 --sparse on --kv-dtype int8 --profile
if [ "${TP:-0}" = 1 ]; then
  mkdir -p $OUT/tp; t0=$(date +%s)
  B=$B OUT=$OUT/tp ONE_GPU=1 timeout 300 bash scripts/tp_gpu.sh > $OUT/tp_summary.txt 2>&1; echo "== tp rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  tail -25 $OUT/tp_summary.txt | tee -a $L
  (cd $OUT/tp && for f in *; do [ -f "$f" ] && cp "$f" "$OUT/tp_$f"; done)
fi
# NIAH per KV dtype on CUDA (#13 item 4), the default model (reassembled from the carried parts).
if [ "${NIAH:-0}" = 1 ]; then
  for kv in bf16 int8 fp8; do t0=$(date +%s)
    timeout 150 $B/lserve niah --device cuda --kv-dtype $kv --lengths 1k,2k,4k,8k --depths 0,25,50,75,100 --sparse both \
      --head-pattern patterns/smollm2-135m.toml --streaming-ratio 0.5 --token-budget 1024 --dense-below 0 \
      --out-dir $OUT/niah_$kv > $OUT/niah_$kv.txt 2>&1; echo "== niah $kv rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
    grep -vE "^\s*$" $OUT/niah_$kv.txt | tail -14 | tee -a $L
    cp $OUT/niah_$kv/results.json $OUT/niah_$kv.json 2>/dev/null
  done
fi
cd $OUT && tar -czf all.tgz *.txt *.json 2>/dev/null; ls | wc -l
