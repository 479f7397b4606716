#!/usr/bin/env bash
# Helpers for one-off measurement scripts run on the device machine (docs/data/*/call*.sh): source
# it after setting BINS (a .tgz of stripped binaries under .gpu/) and, optionally, LIMIT (seconds
# after which no new step starts: a device call ends at 600 s, and a cut-off run keeps what
# ran). It unpacks BINS into $B (/root/<name>), sets up CUDA (scripts/cuda_env.sh) and the Vulkan
# loader (.gl/*.deb, the NVIDIA ICD), and defines:
#   left                    true while fewer than LIMIT seconds have passed
#   pack                    re-tars $OUT/*.txt and *.gz (profiles) into $OUT/all.tgz (the device
#                           returns few files)
#   P name timeout args...  $B/backend_parity args (test filters), summary lines into $OUT/log.txt
#   C name args...          $B/lserve bench --device cuda --shape llama3-8b --head argmax args
#                           (LSERVE_BIN=path runs another lserve binary instead)
#   W name args...          $B/lserve bench --device wgpu --shape llama3-8b --head argmax args
#                           (each bench row ends after BENCH_TIMEOUT seconds, 120 by default: a
#                           fresh machine's first CUDA row also compiles the kernels, ~140 s)
#   E name timeout cmd...   any command (a test binary), summary lines into $OUT/log.txt
# Each step writes $OUT/<name>.txt, logs "== name rc N Ts" and the lines that matter, then packs.
set -uo pipefail
T0=$(date +%s); LIMIT=${LIMIT:-540}
B=/root/$(basename "$(dirname "$BINS")"); mkdir -p "$B"; [ -x "$B/lserve" ] || tar -xzf "$BINS" -C "$B"
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
if ! ldconfig -p | grep -q libvulkan.so.1; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$OUT/log.txt
left() { [ $(( $(date +%s) - T0 )) -lt "$LIMIT" ]; }
pack() { (cd "$OUT" && tar -czf all.tgz $(ls ./*.txt ./*.gz 2>/dev/null)); }
step_end() { # name rc t0
  echo "== $1 rc $2 $(( $(date +%s) - $3 ))s" | tee -a "$L"; }
P() { local name=$1 to=$2; shift 2; left || { echo "skip $name" | tee -a "$L"; return; }; local t0; t0=$(date +%s)
  timeout "$to" "$B/backend_parity" "$@" > "$OUT/$name.txt" 2>&1; step_end "$name" $? "$t0"
  grep -E "test result|FAILED|panicked" "$OUT/$name.txt" | head -8 | tee -a "$L"
  grep -A6 "panicked" "$OUT/$name.txt" | head -24 | tee -a "$L"; pack; }
bench() { local dev=$1 name=$2; shift 2; left || { echo "skip $name" | tee -a "$L"; return; }; local t0; t0=$(date +%s)
  timeout "${BENCH_TIMEOUT:-120}" "${LSERVE_BIN:-$B/lserve}" bench --device "$dev" --shape llama3-8b --head argmax "$@" > "$OUT/$name.txt" 2>&1
  step_end "$name" $? "$t0"; grep -vE "^\s*$" "$OUT/$name.txt" | grep -v "backend    mode" | head -12 | tee -a "$L"; pack; }
C() { bench cuda "$@"; }
W() { bench wgpu "$@"; }
E() { local name=$1 to=$2; shift 2; left || { echo "skip $name" | tee -a "$L"; return; }; local t0; t0=$(date +%s)
  timeout "$to" "$@" > "$OUT/$name.txt" 2>&1; step_end "$name" $? "$t0"
  grep -E "test result|FAILED|panicked" "$OUT/$name.txt" | head -6 | tee -a "$L"
  grep -A5 panicked "$OUT/$name.txt" | head -20 | tee -a "$L"; pack; }
