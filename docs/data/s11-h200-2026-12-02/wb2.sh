#!/usr/bin/env bash
# wb call 2: the U=1 batched GEMV variants against b16 (LSERVE_WGPU_GEMV_BATCH), NVIDIA parity.
set -uo pipefail
B=/root/wb; mkdir -p $B; for f in lserve backend_parity; do gunzip -c .gpu/wb/$f.gz > $B/$f; chmod +x $B/$f; done
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
W() { local name=$1; shift; local t0=$(date +%s)
  timeout 120 $B/lserve bench --device wgpu --shape llama3-8b --dtype f16 --kv-dtype f16 --token-budget 4096 --head argmax --sparse on --contexts 32k "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$|XDG" $OUT/$name.txt | head -6 | tee -a $L; }
for v in cu1 c8u1 c16u1 c4u1; do LSERVE_WGPU_GEMV_BATCH=$v W p8_$v --batch 8 --repeats 2 --profile; done
for v in c8u1 b16; do LSERVE_WGPU_GEMV_BATCH=$v W p16_$v --batch 16 --repeats 2 --profile; done
for v in cu1 c8u1; do LSERVE_WGPU_GEMV_BATCH=$v LSERVE_WGPU_GEMV_BATCH_M1=1 W p1m1_$v --batch 1 --repeats 2 --profile; done
for v in b16 cu1 c8u1 c16u1 c4u1; do LSERVE_WGPU_GEMV_BATCH=$v W t_$v --batch 1,8,16 --repeats 3; done
for v in cu1 c8u1 c16u1 c4u1; do t0=$(date +%s)
  LSERVE_WGPU_GEMV_BATCH=$v LSERVE_REQUIRE_WGPU=1 timeout 60 $B/backend_parity wgpu::matmul::w_f16 wgpu::matmul::w_bf16 wgpu::matmul::w_q4_k > $OUT/par_$v.txt 2>&1
  echo "parity $v rc $? $(( $(date +%s)-t0 ))s $(grep -E 'test result' $OUT/par_$v.txt)" | tee -a $L; grep -A6 panicked $OUT/par_$v.txt | head -12 | tee -a $L
done
cd $OUT && tar -czf all.tgz *.txt && rm -f p8_*.txt p16_*.txt p1*.txt t_*.txt par_*.txt; ls
