#!/usr/bin/env bash
# Session 20, GPU call 4: the rest of the wgpu parity on the H200 with the final code (call 3c ran
# embed and matmul, all 26 passing: one process opens about 30 wgpu devices, then adapters fail
# to open, so the tests run in processes of 25), and the 4K prefill of call 2's binary (k64 as a
# variant, checks off: 554 ms there) against the final one (720 ms in call 3a), alternated.
BINS=.gpu/s20c/bins.tgz LIMIT=${LIMIT:-480}
. scripts/gpu_call_lib.sh
export LSERVE_REQUIRE_WGPU=1
mkdir -p /root/s20b && tar -xzf .gpu/s20b/bins.tgz -C /root/s20b
S="--dtype f16 --kv-dtype f16 --prefill 4096 --sparse on"
old() { local name=$1; shift; left || return; local t0; t0=$(date +%s)
  LSERVE_WGPU_COOP_GEMM=k64 LSERVE_WGPU_CHECKS=nobounds timeout 120 /root/s20b/lserve bench --device wgpu --shape llama3-8b --head argmax "$@" > "$OUT/$name.txt" 2>&1
  step_end "$name" $? "$t0"; grep -E "prefill-sparse" "$OUT/$name.txt" | tee -a "$L"; pack; }
old pf_old1 $S
W pf_new1 $S
old pf_old2 $S
W pf_new2 $S
$B/backend_parity --list 2>/dev/null | grep -E "^wgpu(_plain)?::" | sed 's/: test$//' | grep -v "::embed::\|::matmul::" > /root/wt.txt
split -l 25 -d /root/wt.txt /root/wt.
for f in /root/wt.[0-9]*; do P par_$(basename $f) 120 --exact $(cat $f) --test-threads 2; done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
