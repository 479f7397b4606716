#!/usr/bin/env bash
# Session 20, GPU call 3b (right after 3a): the second part of the default model, kept in /root.
cp .gpu/s20d/smol.part.01 /root/ && ls -la /root/smol.part.*
