#!/usr/bin/env bash
# Session 10, GPU set 4: block-sparse prefill on Gemma 3 270M (global layers) at 16K and 31K on
# CUDA — decode dense (`--dense-below` past the context) so only the prefill differs from dense;
# the GGUF arrives in parts (/root/gem.part0..4 from earlier calls, part 5 in .gpu/g6).
set -uo pipefail
B=/root/s10d; mkdir -p $B; gunzip -c .gpu/c4/lserve.gz > $B/lserve; chmod +x $B/lserve
G=/root/gemma-3-270m-q4_k_m.gguf
[ -f $G ] || cat /root/gem.part0 /root/gem.part1 /root/gem.part2 /root/gem.part3 /root/gem.part4 .gpu/g6/gem.part5 > $G
ls -la $G; sha256sum $G | cut -c1-16
export LSERVE_CACHE=/root/lserve-cache
. scripts/cuda_env.sh >/dev/null
L=$OUT/log.txt
A() { local name=$1; shift; local t0=$(date +%s)
  timeout ${ATO:-280} $B/lserve accuracy -m $G --device cuda --tasks all --budgets 4096 --ratios 0 --pages 64/16 \
    --head-pattern patterns/gemma3-270m.toml --pin-sink-page on --dense-below 1000000 "$@" --out-dir $OUT/$name > $OUT/$name.txt 2>&1
  echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L; grep -vE "^\s*$" $OUT/$name.txt | tail -40 | tee -a $L
  cp $OUT/$name/accuracy.json $OUT/$name.json 2>/dev/null; }
A bs4k --lengths 16k,31k --samples ${SAMPLES:-4} --prefill-budget 4096 --prefill-dense-below 4096
A bs2k --lengths 16k,31k --samples ${SAMPLES:-4} --prefill-budget 2048 --prefill-dense-below 4096
cd $OUT && tar -czf all.tgz *.txt *.json 2>/dev/null; ls | wc -l
