#!/usr/bin/env bash
# Session 32, GPU call 1 (session 31's call 3, never run there): the decode attention's q loaded
# before the key list and the warps' (m, l, O) combined behind one barrier (was one a warp; 27% of
# its stall samples sat on those barriers), plus session 31's kept norms change (s32a), against
# fe524b4 (s31a, session 30's tree) in the same call. Correctness first (decode attention parity,
# the norms, argmax, cuda_e2e), then 8B 32K sparse batch-1 steps alternated old/new, a split cap of
# 49 (one wave), then Nsight Compute's per-kernel times of one Q4_K step on each.
BINS=.gpu/s32a/bins.tgz LIMIT=${LIMIT:-470} # lserve, backend_parity, cuda_e2e (new)
. scripts/gpu_call_lib.sh
OLD=/root/s31a; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s31a/bins.tgz -C $OLD
export LSERVE_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$L"
P par 200 cuda::sparse_decode_attention:: cuda::add_rmsnorm cuda::rmsnorm cuda::argmax
S="--batch 1 --contexts 32k --sparse on --token-budget 4096 --repeats 10"
for r in 1 2; do
  LSERVE_BIN=$OLD/lserve C q4k_old$r --dtype q4_k $S
  C q4k_new$r --dtype q4_k $S
done
LSERVE_CUDA_DECODE_SPLITS=49 C q4k_splits49 --dtype q4_k $S
LSERVE_BIN=$OLD/lserve C i8_old --dtype int8 $S
C i8_new --dtype int8 $S
ncu_step() { # name binary [env...]
  local name=$1 bin=$2 t0; shift 2; t0=$(date +%s)
  left && env "$@" timeout 60 ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
    $bin bench --device cuda --shape llama3-8b --head argmax --dtype q4_k --batch 1 --contexts 32k --sparse on \
    --token-budget 4096 --repeats 2 --warmup 1 --warmup-ms 0 > $OUT/$name.csv 2> $OUT/$name.err
  echo "== $name rc $? $(( $(date +%s)-t0 ))s" | tee -a $L; gzip -f $OUT/$name.csv; pack; }
ncu_step ncu_new $B/lserve
ncu_step ncu_old $OLD/lserve
ncu_step ncu_new49 $B/lserve LSERVE_CUDA_DECODE_SPLITS=49
E e2e 60 $B/cuda_e2e
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
