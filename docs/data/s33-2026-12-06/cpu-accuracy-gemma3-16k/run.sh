#!/usr/bin/env bash
G=~/.cache/lserve/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf
A="accuracy -m $G --device cpu --tasks niah_multikey --samples 3 --lengths 16k --budgets 4096 --ratios 0 --pages 64/16 --pin-sink-page on"
cd /work/main
for v in "ad2048_16k:--prefill-budget 2048 --prefill-dense-below 4096" "mb2048_16k:--prefill-budget 2048 --prefill-dense-below 4096 --prefill-estimate mean_bound"; do
  n=${v%%:*}; f=${v#*:}
  /usr/bin/time -f "$n %e s" ./target/release/lserve $A $f --out-dir /tmp/acc_cpu/$n > /tmp/acc_cpu/$n.txt 2>&1
  tail -1 /tmp/acc_cpu/$n.txt
done
