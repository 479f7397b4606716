#!/usr/bin/env bash
# Session 15, GPU call 3: the wgmma prefill's mask as one branch per tile with selects inside
# (the plain kernel; a branch per element before), A/B against call 2's binaries (.gpu/s15c, same
# kernel otherwise) alternated in this call; `_ws` once more; the PyTorch anchor; 4K, 32K sparse and
# 128K sparse with the new binary. Binaries in .gpu/s15d/bins.tgz (new) and .gpu/s15c (old).
BINS=.gpu/s15d/bins.tgz LIMIT=${LIMIT:-420}
. scripts/gpu_call_lib.sh
LSERVE_REQUIRE_CUDA=1 P pc_all 150 cuda::prefill_attention::
grep -q "test result: ok. 24 passed" $OUT/pc_all.txt || { echo "parity failed" | tee -a $L; exit 0; }
LSERVE_REQUIRE_CUDA=1 LSERVE_CUDA_PREFILL_WGMMA=2 P pc_all_ws 60 cuda::prefill_attention::
for s in 41 42; do LSERVE_TEST_SEED=$s LSERVE_REQUIRE_CUDA=1 P pc_all_s$s 60 cuda::prefill_attention::; done
OLD=/root/s15c; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s15c/bins.tgz -C $OLD
for r in 1 2; do
  C pf32k_new_$r --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
  B0=$B; B=$OLD; C pf32k_old_$r --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile; B=$B0
done
LSERVE_CUDA_PREFILL_WGMMA=2 C pf32k_ws --contexts 4k --repeats 1 --prefill 32768 --sparse off --profile
left && { timeout 90 python3 scripts/torch_prefill_bench.py --lengths 4096,32768 --repeats 2 > $OUT/torch.txt 2>&1; echo "torch rc $?" | tee -a $L; tail -4 $OUT/torch.txt | tee -a $L; pack; }
C pf4k --contexts 4k --repeats 2 --prefill 4096 --sparse both
C pf32k --contexts 4k --repeats 1 --prefill 32768 --sparse both
C pf128k --contexts 4k --repeats 1 --prefill 131072 --sparse on
echo "total $(( $(date +%s) - T0 ))s" | tee -a "$L"; pack
