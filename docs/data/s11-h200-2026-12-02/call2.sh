#!/usr/bin/env bash
# Session 11, GPU call 2: the 8-bit KV summary/attention change (7ceec19) — CUDA parity of the
# KV ops, sparse decode at 128K bf16 vs int8 with the old (80db714) and new binary alternated;
# prefill profiles at 4K (CUDA dense, wgpu sparse) for #11.
set -uo pipefail
B=/root/s11c2; mkdir -p $B/old; tar -xzf .gpu/s11c2/bins.tgz -C $B; tar -xzf .gpu/s11c1/bins.tgz -C $B/old
export LSERVE_CACHE=/root/lserve-cache LSERVE_REQUIRE_CUDA=1
. scripts/cuda_env.sh >/dev/null
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
t0=$(date +%s); timeout 120 $B/backend_parity cuda::rope_append_kv cuda::sparse_decode_attention cuda::page_select cuda::swap_round_trip cuda::lambda_mass > $OUT/parity_cuda.txt 2>&1; echo "cuda parity rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -E "test result|FAILED|panicked" $OUT/parity_cuda.txt | head -12 | tee -a $L; grep -A8 "panicked" $OUT/parity_cuda.txt | head -30 | tee -a $L
C() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 150 $bin bench --device cuda --shape llama3-8b --token-budget 4096 --head argmax --batch 1 "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -14 | tee -a $L; }
for r in 1 2; do for kv in bf16 int8; do
  C sp_${kv}_old_$r $B/old/lserve --contexts 128k --sparse on --kv-dtype $kv --repeats 10
  C sp_${kv}_new_$r $B/lserve --contexts 128k --sparse on --kv-dtype $kv --repeats 10
done; done
C sp_int8_new_prof $B/lserve --contexts 128k --sparse on --kv-dtype int8 --repeats 5 --profile
C dense_int8_new $B/lserve --contexts 128k --sparse off --kv-dtype int8 --repeats 5
C dense_int8_old $B/old/lserve --contexts 128k --sparse off --kv-dtype int8 --repeats 5
C pf4k_dense_prof $B/lserve --contexts 4k --prefill 4096 --sparse off --repeats 2 --profile
t0=$(date +%s); timeout 150 $B/lserve bench --device wgpu --shape llama3-8b --dtype f16 --kv-dtype f16 --token-budget 4096 --head argmax --sparse on --contexts 4k --prefill 4096 --repeats 1 --profile > $OUT/w_pf4k_prof.txt 2>&1; echo "== w_pf4k_prof rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
grep -vE "^\s*$" $OUT/w_pf4k_prof.txt | head -24 | tee -a $L
cd $OUT && tar -czf all.tgz *.txt 2>/dev/null; ls | wc -l
