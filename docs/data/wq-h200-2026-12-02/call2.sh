#!/usr/bin/env bash
# wq GPU call 2: the new binary (bench warm-up >= 1 s, parallel pack, GEMV x8 rows per subgroup).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
B=/root/b; mkdir -p $B; gunzip -c .gpu/wq/lserve_new.gz > $B/lserve; chmod +x $B/lserve
L=$OUT/log.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,memory.used --format=csv -lms 100 > $OUT/clk.txt &
CLK=$!
W() { local name=$1; shift
  echo "== $name start $(date +%T.%N)" >> $L
  timeout 100 $B/lserve bench --device wgpu --shape llama3-8b --token-budget 4096 --head argmax --sparse on --contexts 32k --kv-dtype f16 --batch 1 "$@" > $OUT/r_$name.txt 2>&1; echo "== $name rc $? end $(date +%T.%N)" | tee -a $L
  grep -vE "^\s*$" $OUT/r_$name.txt | head -12 | tee -a $L; }
W q4k_r2 --dtype q4_k --repeats 20
LSERVE_WGPU_GEMV_X8=1 W q4k_r1 --dtype q4_k --repeats 20
LSERVE_WGPU_GEMV_X8=4 W q4k_r4 --dtype q4_k --repeats 20
LSERVE_WGPU_GEMV_X8=f32 W q4k_f32 --dtype q4_k --repeats 20
W q4k_r2_prof --dtype q4_k --repeats 5 --profile
W q4k_cold --dtype q4_k --repeats 3 --warmup-ms 0
W q80_r2 --dtype q8_0 --repeats 20
LSERVE_WGPU_GEMV_X8=1 W q80_r1 --dtype q8_0 --repeats 20
W f16 --dtype f16 --repeats 20
kill $CLK
cd $OUT && tar -czf runs.tgz r_*.txt && rm r_*.txt
