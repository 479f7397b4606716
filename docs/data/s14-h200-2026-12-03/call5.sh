#!/usr/bin/env bash
# Session 14, GPU call 5: the warp-specialized wgmma prefill (`_ws`: a producer warp stages key
# tiles, mbarriers per stage, no block barrier between the warpgroups) against the plain kernel
# (its staging as in call 4). Parity of both over seeds; if _ws passes, 32K dense profiled
# alternated, the PyTorch anchor, 4K / 32K / 128K unprofiled. Binaries in .gpu/s14c/bins.tgz.
BINS=.gpu/s14c/bins.tgz LIMIT=${LIMIT:-480}
. scripts/gpu_call_lib.sh
F="cuda::prefill_attention::kv_bf16_hd128 cuda::prefill_attention::kv_f16_hd128"
LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=2 P pc_ws 150 $F
ws=0; grep -q "test result: ok. 2 passed" $OUT/pc_ws.txt && ws=1
for s in 31 32 33; do LSERVE_TEST_SEED=$s LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=1 P pc_v1_s$s 30 $F
  [ $ws = 1 ] && LSERVE_TEST_SEED=$s LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=2 P pc_ws_s$s 30 $F; done
VS="1"; [ $ws = 1 ] && VS="1 2"
for r in 1 2; do for v in $VS; do
  LSERVE_CUDA_PREFILL_WGMMA=$v C pf32k_v${v}_$r --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
done; done
left && { timeout 90 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
for v in $VS; do LSERVE_CUDA_PREFILL_WGMMA=$v C pf_v$v --contexts 4k --repeats 1 --prefill 32768 --sparse both; done
for v in $VS; do LSERVE_CUDA_PREFILL_WGMMA=$v C pf4k_v$v --contexts 4k --repeats 1 --prefill 4096 --sparse both; done
for v in $VS; do LSERVE_CUDA_PREFILL_WGMMA=$v C pf128k_v$v --contexts 4k --repeats 1 --prefill 131072 --sparse on; done
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
