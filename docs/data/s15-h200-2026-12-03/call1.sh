#!/usr/bin/env bash
# Session 15, GPU call 1: `_ws` rebuilt as FlashAttention-3 schedules it (setmaxnreg 56/224,
# K and V stages with their own mbarriers, copies arriving by cp.async.mbarrier, bursts of S(ti)
# and P V(ti - 1) taking turns between the two computing warpgroups on named barriers). Parity
# over seeds, 32K dense profiled alternated with the plain kernel, the PyTorch anchor, then 32K
# dense+sparse and 128K sparse with `_ws`. Binaries in .gpu/s15a/bins.tgz.
BINS=.gpu/s15a/bins.tgz LIMIT=${LIMIT:-480}
. scripts/gpu_call_lib.sh
F="cuda::prefill_attention::kv_bf16_hd128 cuda::prefill_attention::kv_f16_hd128"
LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=2 P pc_ws 150 $F
grep -q "test result: ok. 2 passed" $OUT/pc_ws.txt || { echo "ws failed" | tee -a $L; exit 0; }
for s in 41 42 43; do LSERVE_TEST_SEED=$s LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=2 P pc_ws_s$s 30 $F; done
for r in 1 2; do for v in 1 2; do
  LSERVE_CUDA_PREFILL_WGMMA=$v C pf32k_v${v}_$r --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
done; done
left && { timeout 90 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
LSERVE_CUDA_PREFILL_WGMMA=2 C pf_v2 --contexts 4k --repeats 1 --prefill 32768 --sparse both
LSERVE_CUDA_PREFILL_WGMMA=2 C pf128k_v2 --contexts 4k --repeats 1 --prefill 131072 --sparse on
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
