#!/usr/bin/env bash
# Session 16, GPU call 2: programmatic dependent launch (every kernel begins with pdl_enter:
# griddepcontrol.wait, then launch_dependents; the host launches with cuLaunchKernelEx and
# programmatic stream serialization, LSERVE_CUDA_PDL=on|off, default on for sm_90+). Correctness
# with it on (the default): CUDA e2e greedy vs CPU and graph replay bit-identity, TP on one GPU,
# every CUDA parity test. Then decode steps with it on vs off, alternated: 32K sparse batch 1
# (bf16, q4_k, q8_0 weights), 32K sparse batch 16 (bf16), and 4K / 32K dense prefill.
BINS=.gpu/s16b/bins.tgz LIMIT=${LIMIT:-520}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_CUDA=1
E() { local name=$1 to=$2; shift 2; local t0; t0=$(date +%s)
  timeout "$to" "$@" > "$OUT/$name.txt" 2>&1; step_end "$name" $? "$t0"
  grep -E "test result|FAILED|panicked" "$OUT/$name.txt" | head -6 | tee -a "$L"; pack; }
E e2e 200 $B/cuda_e2e --nocapture
E tp 90 $B/cuda_tp
P parity 200 cuda::
grep -q "test result: ok" $OUT/e2e.txt && grep -q "test result: ok" $OUT/parity.txt || { echo "correctness failed" | tee -a $L; exit 0; }
S() { C "$@" --contexts 32k --sparse on --token-budget 4096 --repeats 10; }
for r in 1 2; do
  for pdl in on off; do
    export LSERVE_CUDA_PDL=$pdl
    S bf16_${pdl}_$r --batch 1
    S q4k_${pdl}_$r --batch 1 --dtype q4_k
    S q80_${pdl}_$r --batch 1 --dtype q8_0
    S b16_${pdl}_$r --batch 16
  done
done
for pdl in on off; do LSERVE_CUDA_PDL=$pdl C pf_${pdl} --contexts 4k --repeats 1 --prefill 32768 --sparse off; done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
