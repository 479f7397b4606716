#!/usr/bin/env python3
"""Greedy continuations of the four reference prompts (tests/data/smollm2_ref.json) per KV dtype on
the CPU backend, compared with transformers' 24 greedy ids (docs/kv-cache.md). d2_chat is given
without its <|im_end|> tokens, as the reference generation saw it (tests/smollm2.rs).
Usage: scripts/kv_greedy_check.py LSERVE_BINARY [DTYPE ...]"""
import json, subprocess, sys

ref = json.load(open("tests/data/smollm2_ref.json"))
binary = sys.argv[1]
dtypes = sys.argv[2:] or ["f32", "int8", "fp8"]
for kv in dtypes:
    for name, p in ref["prompts"].items():
        text = p["text"].replace("<|im_end|>", "") if name == "d2_chat" else p["text"]
        out = subprocess.run([binary, "generate", "--device", "cpu", "--kv-dtype", kv, "-p", text, "--max-tokens", "24",
                              "--ignore-eos", "--output", "json"], capture_output=True, text=True, check=True).stdout
        got = json.loads(out)["token_ids"]
        want = p["greedy24_ids"]
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        print(f"{kv:>5} {name:>9}: " + ("24/24 identical" if first is None else f"first difference at token {first}"), flush=True)
