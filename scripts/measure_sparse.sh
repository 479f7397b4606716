#!/usr/bin/env bash
# Sparse-attention measurements on the default model (CPU backend) for docs/sparse-attention.md:
# head calibration, perplexity dense vs sparse (budgets x streaming ratios, scored through decode
# steps so page selection is what gets measured), and the NIAH sweep. Usage:
#   scripts/measure_sparse.sh OUT_DIR [LSERVE_BINARY]
set -euo pipefail
out=${1:?usage: measure_sparse.sh OUT_DIR [LSERVE]}
bin=${2:-target/release/lserve}
mkdir -p "$out"
doc="$out/doc.txt"
# A natural-language document of about 4K tokens: the start of the GPL-3 text shipped by Debian.
head -c 17000 /usr/share/common-licenses/GPL-3 > "$doc"
pattern="$out/heads.toml"
[ -f "$pattern" ] || "$bin" calibrate --out "$pattern" --docs 4 --length 4096 > "$out/calibrate.txt"
echo "config,streaming_ratio,token_budget,tokens,mean_nll,perplexity,kv_read_fraction" > "$out/ppl.csv"
score() { # name ratio budget [flags...]
  local name=$1 ratio=$2 budget=$3; shift 3
  local j; j=$("$bin" score --file "$doc" --output json --decode-after 512 "$@")
  python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(f\"$name,$ratio,$budget,{d['tokens']},{d['mean_nll']:.5f},{d['perplexity']:.4f},{d['kv_read_fraction']:.4f}\")" "$j" >> "$out/ppl.csv"
  tail -1 "$out/ppl.csv"
}
score dense - - --sparse off
for ratio in 0 0.25 0.5; do
  for budget in 256 512 1024; do
    score sparse "$ratio" "$budget" --sparse on --dense-below 0 --streaming-ratio "$ratio" --head-pattern "$pattern" --token-budget "$budget"
  done
done
"$bin" niah --lengths 1k,2k,4k,8k --depths 0,25,50,75,100 --out-dir "$out/niah" --sparse both \
  --head-pattern "$pattern" --streaming-ratio 0.5 --token-budget 1024 --dense-below 0 | tee "$out/niah.txt"
column -s, -t "$out/ppl.csv"
# The perplexity chart (cargo build --release --example plot_ppl first).
plot=$(dirname "$bin")/examples/plot_ppl
if [ -x "$plot" ]; then "$plot" "$out/ppl.csv" "$out/ppl.png"; else echo "no $plot: skipping ppl.png"; fi
