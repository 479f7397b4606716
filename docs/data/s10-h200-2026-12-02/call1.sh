#!/usr/bin/env bash
# Session 10, GPU set 1: 16-bit activations (CUDA) old vs new binary in one call: parity, bit-identity
# on the default model (score NLL, greedy ids), prefill 4K/32K (+ profile), decode no-regress,
# PyTorch prefill anchor; wgpu batch 1/8 decode profile (baseline for the batched GEMV work).
set -uo pipefail
B=/root/s10; mkdir -p $B; tar -xzf .gpu/c1/bins.tgz -C $B
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
M=$LSERVE_CACHE/models/smollm2-135m; mkdir -p $M
[ -f $M/SmolLM2-135M-Instruct.Q4_1.gguf ] || cat /root/smol.part0 /root/smol.part1 .gpu/c1/smol.part2 > $M/SmolLM2-135M-Instruct.Q4_1.gguf
ls -la $M
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a $L
t0=$(date +%s); timeout 200 $B/backend_parity cuda::rmsnorm cuda::add_rmsnorm cuda::silu_mul cuda::matmul > $OUT/parity.txt 2>&1; echo "parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity.txt | head -12 | tee -a $L; grep -A8 "panicked" $OUT/parity.txt | head -30 | tee -a $L
for v in old new; do
  bin=$B/lserve; [ $v = old ] && bin=$B/lserve-old
  timeout 120 $bin score --device cuda --file $B/doc.txt --output json > $OUT/score_$v.json 2> $OUT/score_$v.err; echo "score $v rc $?: $(head -c 300 $OUT/score_$v.json)" | tee -a $L
  timeout 120 $bin score --device cuda --weights dequant --dtype bf16 --file $B/doc.txt --output json > $OUT/score_bf16_$v.json 2>> $OUT/score_$v.err; echo "score bf16 $v rc $?: $(head -c 300 $OUT/score_bf16_$v.json)" | tee -a $L
  timeout 60 $bin generate --device cuda --weights dequant --dtype bf16 --prompt "Octopuses are remarkable animals because" --max-tokens 48 --output json > $OUT/gen_$v.json 2>>$OUT/score_$v.err; echo "gen $v rc $?" | tee -a $L
done
python3 - <<PY | tee -a $L
import json
a=json.load(open("$OUT/gen_old.json")); b=json.load(open("$OUT/gen_new.json"))
print("greedy ids equal:", a["token_ids"]==b["token_ids"], len(a["token_ids"]))
for n in ["score","score_bf16"]:
    try:
        o=json.load(open(f"$OUT/{n}_old.json")); w=json.load(open(f"$OUT/{n}_new.json")); print(n, o.get("mean_nll"), w.get("mean_nll"))
    except Exception as e: print(n, "error", e)
PY
PB() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 200 $bin bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -40 | tee -a $L; }
for r in 1 2; do
PB p4k_old_$r $B/lserve-old --contexts 1k --batch 1 --repeats 1 --prefill 4096 --sparse both
PB p4k_new_$r $B/lserve --contexts 1k --batch 1 --repeats 1 --prefill 4096 --sparse both
done
PB p32k_old $B/lserve-old --contexts 1k --batch 1 --repeats 1 --prefill 32768 --sparse both
PB p32k_new $B/lserve --contexts 1k --batch 1 --repeats 1 --prefill 32768 --sparse both
PB p4k_new_prof $B/lserve --contexts 1k --batch 1 --repeats 1 --prefill 4096 --sparse off --profile
PB p32k_new_prof $B/lserve --contexts 1k --batch 1 --repeats 1 --prefill 32768 --sparse off --profile
timeout 150 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 3 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L
tail -4 $OUT/torch.txt | tee -a $L
PB dec_old $B/lserve-old --contexts 32k --batch 1,16 --repeats 5 --sparse on
PB dec_new $B/lserve --contexts 32k --batch 1,16 --repeats 5 --sparse on
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
timeout 150 $B/lserve-old bench --device wgpu --shape llama3-8b --contexts 32k --batch 1,8 --sparse on --token-budget 4096 --head argmax --repeats 3 --profile > $OUT/wgpu_prof.txt 2>&1; echo "wgpu rc $?" | tee -a $L
grep -vE "^\s*$" $OUT/wgpu_prof.txt | head -60 | tee -a $L
cd $OUT && tar -czf all.tgz *.txt *.json 2>/dev/null
