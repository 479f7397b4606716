#!/usr/bin/env bash
set -uo pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
B=/root/b; mkdir -p $B; gunzip -c .gpu/wq/lserve_base.gz > $B/lserve; chmod +x $B/lserve
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,persistence_mode,pstate,clocks.sm,clocks.max.sm --format=csv | tee -a $L
nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.mem,power.draw,utilization.gpu,memory.used,clocks_throttle_reasons.active --format=csv -lms 100 > $OUT/clk.txt &
CLK=$!
W() { local name=$1; shift; local t0=$(date +%s.%N)
  echo "== $name start $(date +%T.%N)" >> $L
  timeout 120 $B/lserve bench --device wgpu --shape llama3-8b --token-budget 4096 --head argmax --sparse on --contexts 32k --kv-dtype f16 --batch 1 "$@" > $OUT/$name.txt 2>&1; echo "== $name rc $? end $(date +%T.%N)" | tee -a $L
  grep -vE "^\s*$" $OUT/$name.txt | head -14 | tee -a $L; }
W q4k_prof --dtype q4_k --repeats 3 --profile
W q4k_long --dtype q4_k --warmup 3 --repeats 60
W q4k_longprof --dtype q4_k --warmup 60 --repeats 5 --profile
W f16_prof --dtype f16 --repeats 3 --profile
W f16_long --dtype f16 --warmup 3 --repeats 60
kill $CLK
