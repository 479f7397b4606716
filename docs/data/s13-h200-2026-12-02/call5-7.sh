#!/usr/bin/env bash
# Session 13, GPU calls 5-7 (short, on the machine call 4 had started; each line was one call's
# command). Raw output in call5/, call6/, call7/. .gpu/s13 = the call-1 binaries (main at
# 8e97e8e), .gpu/s13c = main after the wgpu matmul variants were removed (46997fb).
BINS=.gpu/s13c/bins.tgz; . scripts/gpu_call_lib.sh
case "${CALL:-5}" in
# 5: wgpu f16 32K batch 1 / 8 again (call 4's batch 8 was 15.2 ms against call 1's 14.7-14.9).
5) for r in 2 3 4; do W f16_$r --dtype f16 --kv-dtype f16 --token-budget 4096 --sparse on --contexts 32k --batch 1,8 --repeats 20; done ;;
# 6: the call-1 binary against today's, alternated on the same machine.
6) A=/root/s13; mkdir -p $A; tar -xzf .gpu/s13/bins.tgz -C $A
   for r in 1 2 3; do
     W new_$r --dtype f16 --kv-dtype f16 --token-budget 4096 --sparse on --contexts 32k --batch 1,8 --repeats 20
     B=$A W old_$r --dtype f16 --kv-dtype f16 --token-budget 4096 --sparse on --contexts 32k --batch 1,8 --repeats 20
   done ;;
# 7: the decode-attention grid target (LSERVE_WGPU_DECODE_WORKGROUPS, default 1024).
7) for r in 1 2; do for n in 1024 2048 4096 512; do
     LSERVE_WGPU_DECODE_WORKGROUPS=$n W wg${n}_$r --dtype f16 --kv-dtype f16 --token-budget 4096 --sparse on --contexts 32k --batch 1,8 --repeats 20
   done; done ;;
esac
