#!/usr/bin/env bash
# Session 41, GPU call 2 (the same warm H100 right after call 1, whose prefill rows its LIMIT had
# skipped; 194 s of device time left): the 32K dense prefill with the Hopper kernel's lazy
# rescaling (s41p) against this session's tree without it (s41c), alternated. Run as one line.
BINS=.gpu/s41p/bins.tgz LIMIT=140; . scripts/gpu_call_lib.sh; OLD=/root/s41c; mkdir -p $OLD; [ -x $OLD/lserve ] || tar -xzf .gpu/s41c/bins.tgz -C $OLD; export LSERVE_REQUIRE_CUDA=1; PF="--contexts 4k --repeats 1"; C dense32_new1 $PF --prefill 32768; LSERVE_BIN=$OLD/lserve C dense32_old1 $PF --prefill 32768; C dense32_new2 $PF --prefill 32768; LSERVE_BIN=$OLD/lserve C dense32_old2 $PF --prefill 32768; C dense32_new3 $PF --prefill 32768; echo "total $(( $(date +%s) - T0 ))s"
