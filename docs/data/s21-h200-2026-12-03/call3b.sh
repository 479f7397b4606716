#!/usr/bin/env bash
# Session 21, GPU call 3b (right after 3a): the second part of the default model, kept in /root.
cp .gpu/s21f/smol.part.01 /root/ && ls -la /root/smol.part.*
