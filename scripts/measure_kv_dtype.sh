#!/usr/bin/env bash
# KV dtype accuracy on the default model (CPU backend) for docs/kv-cache.md: mean NLL of a ~3.6K-token
# natural text per KV dtype, dense (scored by prefill: every key and value is read back from the
# quantized cache) and sparse (ratio 0.5, budget 1024, the last 3,117 tokens through decode steps),
# then the NIAH sweep per KV dtype. Usage:
#   scripts/measure_kv_dtype.sh OUT_DIR [LSERVE_BINARY] [DTYPES] [NIAH_DTYPES]
set -euo pipefail
out=${1:?usage: measure_kv_dtype.sh OUT_DIR [LSERVE] [DTYPES] [NIAH_DTYPES]}
bin=${2:-target/release/lserve}
dtypes=${3:-f32 int8 fp8}
niah_dtypes=${4:-int8 fp8}
mkdir -p "$out"
doc="$out/doc.txt"
head -c 17000 /usr/share/common-licenses/GPL-3 > "$doc"
pattern=patterns/smollm2-135m.toml
[ -f "$out/nll.csv" ] || echo "kv_dtype,config,tokens,mean_nll,perplexity,kv_read_fraction,seconds" > "$out/nll.csv"
score() { # kv name [flags...]
  local kv=$1 name=$2; shift 2
  local t0 j; t0=$(date +%s)
  j=$("$bin" score --device cpu --file "$doc" --output json --kv-dtype "$kv" "$@")
  python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(f\"$kv,$name,{d['tokens']},{d['mean_nll']:.5f},{d['perplexity']:.4f},{d['kv_read_fraction']:.4f},$(( $(date +%s) - t0 ))\")" "$j" >> "$out/nll.csv"
  tail -1 "$out/nll.csv"
}
for kv in $dtypes; do
  score "$kv" dense-prefill --sparse off
done
for kv in $dtypes; do
  score "$kv" sparse-0.5-1024 --sparse on --decode-after 512 --dense-below 0 --streaming-ratio 0.5 \
    --head-pattern "$pattern" --token-budget 1024
done
for kv in $niah_dtypes; do
  "$bin" niah --device cpu --lengths 1k,2k,4k,8k --depths 0,25,50,75,100 --out-dir "$out/niah-$kv" --sparse both \
    --head-pattern "$pattern" --streaming-ratio 0.5 --token-budget 1024 --dense-below 0 --kv-dtype "$kv" \
    | tee "$out/niah-$kv.txt"
done
column -s, -t "$out/nll.csv"
