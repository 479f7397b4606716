#!/usr/bin/env bash
# Session 21, GPU call 1b (right after 1a): the second part of the default model, kept in /root.
cp .gpu/s21b/smol.part.01 /root/ && ls -la /root/smol.part.*
