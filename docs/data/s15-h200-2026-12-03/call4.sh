#!/usr/bin/env bash
# Session 15, GPU call 4: rmsnorm / add_rmsnorm with 16-byte loads and 256-thread blocks from 1024
# rows, silu_mul's 16-bit output in one 8-byte store, the mma.sync prefill's mask as call 3's
# wgmma one (pm_mask) (.gpu/s15f), A/B against call 3's binaries (.gpu/s15d) alternated in this
# call; the PyTorch anchor; 4K, 32K and 128K; decode rows of both; mma.sync (WGMMA=0) A/B.
BINS=.gpu/s15f/bins.tgz LIMIT=${LIMIT:-400}
. scripts/gpu_call_lib.sh
LSERVE_REQUIRE_CUDA=1 P pc_el 150 cuda::rmsnorm cuda::add_rmsnorm cuda::silu_mul cuda::prefill_attention::
grep -q "test result: ok. 27 passed" $OUT/pc_el.txt || { echo "parity failed" | tee -a $L; exit 0; }
LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=0 P pc_mma 60 cuda::prefill_attention::
OLD=/root/s15d; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s15d/bins.tgz -C $OLD
for r in 1 2; do
  C pf32k_new_$r --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
  B0=$B; B=$OLD; C pf32k_old_$r --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile; B=$B0
done
left && { timeout 90 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
C pf4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
C pf32k --contexts 4k --repeats 1 --prefill 32768 --sparse both
C dec32k --contexts 32k --repeats 3 --sparse both
B0=$B; B=$OLD; C dec32k_old --contexts 32k --repeats 3 --sparse both; B=$B0
LSERVE_CUDA_PREFILL_WGMMA=0 C pf32k_mma_new --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
B0=$B; B=$OLD; LSERVE_CUDA_PREFILL_WGMMA=0 C pf32k_mma_old --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile; B=$B0
C pf128k --contexts 4k --repeats 1 --prefill 131072 --sparse on
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
