#!/usr/bin/env bash
# SmolLM2-135M on the CPU, the GPL-3 text of scripts/measure_sparse.sh (17,000 bytes, scored
# through decode steps after the first 512 tokens), streaming ratio 0, budget 1024: the bound
# (shrink 0) against boxes shrunk by 0.75, per page geometry, pin off (the setting).
b=${1:-/tmp/lserve_final}
echo "variant,shrink,mean_nll,kv_read_fraction"
s() { local name=$1; shift; j=$($b score --file doc.txt --output json --decode-after 512 "$@" 2>/dev/null)
  python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(f\"$name,{d['mean_nll']:.5f},{d['kv_read_fraction']:.4f}\")" "$j"; }
s dense,- --sparse off
for pg in 64/16 16/16 64/64; do for sh in 0 0.75; do
  s "p$pg,$sh" --sparse on --dense-below 0 --streaming-ratio 0 --token-budget 1024 --physical-page ${pg%/*} --logical-page ${pg#*/} --bound-shrink $sh
done; done
