#!/usr/bin/env bash
# Session 20, GPU call 5b (right after 5a): the second part of the default model, kept in /root.
cp .gpu/s20d/smol.part.01 /root/ && ls -la /root/smol.part.*
