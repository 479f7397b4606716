#!/usr/bin/env bash
# Session 19, GPU call 4b (right after 4a): the second part of the default model and the lserve /
# quant_weights binaries, kept in /root for call 4c.
cp .gpu/s19d/smol.part.01 /root/ && mkdir -p /root/s19d && tar -xzf .gpu/s19d/bins.tgz -C /root/s19d && ls -la /root/s19d /root/smol.part.*
