#!/usr/bin/env bash
# Session 34: carry one 61 MiB part of the Gemma 3 270M GGUF (.gpu/gemma/*.partNN, named in
# `carry`) into /root/gm on the warm device machine; call with the part's number. After the
# fourth, the parts are joined into /root/gm/gemma-3-270m-q4_k_m.gguf.
set -eu; N=$1; mkdir -p /root/gm
cp .gpu/gemma/gemma-3-270m-q4_k_m.gguf.part$N /root/gm/
ls /root/gm
if [ "$(ls /root/gm/*.part0? | wc -l)" = 4 ]; then cat /root/gm/*.part0? > /root/gm/gemma-3-270m-q4_k_m.gguf; rm /root/gm/*.part0?; fi
ls -la /root/gm; sha256sum /root/gm/* | tee $OUT/sha.txt
