#!/usr/bin/env bash
# Session 21, GPU call 4b (right after 4a): the second part of the default model, kept in /root.
cp .gpu/s21i/smol.part.01 /root/ && ls -la /root/smol.part.*
