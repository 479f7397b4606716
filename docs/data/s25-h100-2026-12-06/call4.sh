#!/usr/bin/env bash
# Session 25, GPU call 4 (same binaries and machine): every wgpu parity test on this GPU's Vulkan,
# 20 tests per process. (Calls 2-3: in one process the first 30 tests passed and every later one
# found no adapter, with 16 threads or 2: NVIDIA's Vulkan driver gives a process about 30 devices
# and each test opens its own.)
BINS=.gpu/s25/bins.tgz LIMIT=${LIMIT:-500}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
$B/backend_parity wgpu --list 2>/dev/null | grep ': test$' | sed 's/: test$//' > $OUT/wlist.txt
echo "$(wc -l < $OUT/wlist.txt) wgpu tests" | tee -a $L
split -l 20 -d $OUT/wlist.txt $OUT/wchunk_
for f in $OUT/wchunk_*; do
  left || break
  n=$(basename $f)
  timeout 200 $B/backend_parity --exact $(cat $f) > $OUT/wpar_$n.txt 2>&1
  echo "$n rc $? $(grep 'test result' $OUT/wpar_$n.txt)" | tee -a $L
  grep -E "FAILED|panicked" $OUT/wpar_$n.txt | head -4 | tee -a $L
done
rm -f $OUT/wchunk_*
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
