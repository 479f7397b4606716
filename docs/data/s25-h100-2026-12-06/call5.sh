#!/usr/bin/env bash
# Session 25, GPU call 5: call 4's chunk 05 (it stopped at the 200 s timeout with 7 of 20 tests
# reported) one test per process, 40 s each, to find the one that hangs.
BINS=.gpu/s25/bins.tgz LIMIT=${LIMIT:-400}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
for t in $(cat docs/data/s25-h100-2026-12-06/chunk05.txt); do
  left || break
  t0=$(date +%s); timeout 40 $B/backend_parity --exact "$t" > $OUT/one.txt 2>&1; rc=$?
  echo "$t rc $rc $(( $(date +%s) - t0 ))s $(grep -o 'test result: [a-zA-Z]*. [0-9]* passed' $OUT/one.txt)" | tee -a $L
  [ $rc = 0 ] || { cp $OUT/one.txt "$OUT/fail_${t//:/_}.txt"; grep -E "panicked|assert" -A3 $OUT/one.txt | head -6 | tee -a $L; }
done
rm -f $OUT/one.txt
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
