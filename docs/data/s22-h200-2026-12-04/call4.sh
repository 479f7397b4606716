#!/usr/bin/env bash
# Session 22, GPU call 4 (right after call 3): the second part of the default model, kept in /root.
cp .gpu/s22d/smol.part.01 /root/ && ls -la /root/smol.part.*
