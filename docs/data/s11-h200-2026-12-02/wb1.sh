#!/usr/bin/env bash
# wb call 1: batched GEMV variants (LSERVE_WGPU_GEMV_BATCH), new norms, attention patch binary.
set -uo pipefail
B=/root/wb; mkdir -p $B; for f in lserve lserve-attn backend_parity; do gunzip -c .gpu/wb/$f.gz > $B/$f; chmod +x $B/$f; done
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
$B/lserve devices 2>&1 | grep -v XDG | tee -a $L
W() { local name=$1 bin=$2; shift 2; local t0=$(date +%s)
  timeout 120 $bin bench --device wgpu --shape llama3-8b --dtype f16 --kv-dtype f16 --token-budget 4096 --head argmax --sparse on --contexts 32k "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L
  grep -vE "^\s*$|XDG" $OUT/$name.txt | head -12 | tee -a $L; }
for v in b16 c c128 c64 c8 cu4 c8u4 cu1 r32; do
  LSERVE_WGPU_GEMV_BATCH=$v W p8_$v $B/lserve --batch 8 --repeats 2 --profile
done
LSERVE_WGPU_GEMV_BATCH=c LSERVE_WGPU_GEMV_BATCH_M1=1 W p1_m1c $B/lserve --batch 1 --repeats 2 --profile
LSERVE_WGPU_GEMV_BATCH_M1=1 W p1_m1b16 $B/lserve --batch 1 --repeats 2 --profile
W p1 $B/lserve --batch 1 --repeats 2 --profile
W attn_p $B/lserve-attn --batch 1,8 --repeats 2 --profile
for v in b16 c c8 cu4; do LSERVE_WGPU_GEMV_BATCH=$v W t_$v $B/lserve --batch 1,8,16 --repeats 3; done
for v in b16 c c128 c64 c8 cu4 c8u4 cu1; do t0=$(date +%s)
  LSERVE_WGPU_GEMV_BATCH=$v LSERVE_REQUIRE_WGPU=1 timeout 60 $B/backend_parity wgpu::matmul::w_f16 wgpu::matmul::w_bf16 wgpu::matmul::w_q4_k > $OUT/par_$v.txt 2>&1
  echo "parity $v rc $? $(( $(date +%s)-t0 ))s $(grep -E 'test result' $OUT/par_$v.txt)" | tee -a $L; grep -A6 panicked $OUT/par_$v.txt | head -12 | tee -a $L
done
LSERVE_REQUIRE_WGPU=1 timeout 60 $B/backend_parity wgpu::rmsnorm wgpu::add_rmsnorm wgpu::head_rmsnorm > $OUT/par_norm.txt 2>&1; echo "parity norms rc $? $(grep -E 'test result' $OUT/par_norm.txt)" | tee -a $L
cd $OUT && tar -czf all.tgz *.txt && rm -f p8_*.txt p1*.txt t_*.txt par_*.txt attn_p.txt; ls
