#!/usr/bin/env python3
"""Load benchmark for `lserve serve` (not a test): N concurrent clients, each sending requests
back to back (closed loop) with prompts of mixed lengths, streaming. Reports request and token
throughput, time to first token and inter-token latency percentiles, as text and optionally JSON.

Needs the `openai` package (tests/serve_openai.rs leaves a venv with it in target/openai-venv):

    target/release/lserve serve --device cpu --max-num-seqs 32 &
    target/openai-venv/bin/python scripts/load_bench.py --clients 16 --requests 64 --max-tokens 64
"""
import argparse
import json
import random
import statistics
import threading
import time

from openai import OpenAI

WORDS = ("the river ran past the old mill where a miller kept seven cats and a ledger of every sack of "
         "grain he ground for the village through the long winter").split()


def prompt_of(n_words, rng):
    body = " ".join(rng.choice(WORDS) for _ in range(n_words))
    return f"Summarize the following notes in one sentence.\n\n{body}\n\nSummary:"


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=64, help="total requests")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", default="16,128,512", help="prompt lengths in words, mixed uniformly")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    client = OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=3600)
    rng = random.Random(a.seed)
    lengths = [int(x) for x in a.prompt_words.split(",")]
    jobs = [prompt_of(rng.choice(lengths), rng) for _ in range(a.requests)]
    lock = threading.Lock()
    ttft, itl, e2e, gen_tokens, prompt_tokens, errors = [], [], [], [0], [0], []

    def one(prompt):
        t0 = time.perf_counter()
        last, first, n = None, None, 0
        s = client.completions.create(model=a.model, prompt=prompt, max_tokens=a.max_tokens, temperature=0,
                                      stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        gaps, usage = [], None
        for chunk in s:
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].text:
                now = time.perf_counter()
                if first is None:
                    first = now - t0
                else:
                    gaps.append(now - last)
                last = now
                n += 1
        with lock:
            if first is not None:
                ttft.append(first)
            itl.extend(gaps)
            e2e.append(time.perf_counter() - t0)
            if usage:
                gen_tokens[0] += usage.completion_tokens
                prompt_tokens[0] += usage.prompt_tokens

    def worker():
        while True:
            with lock:
                if not jobs:
                    return
                p = jobs.pop()
            try:
                one(p)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(repr(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ms = lambda xs, p: 1e3 * pct(xs, p)  # noqa: E731
    res = {
        "clients": a.clients, "requests": a.requests, "max_tokens": a.max_tokens, "prompt_words": lengths,
        "errors": len(errors), "wall_s": wall, "requests_per_s": len(e2e) / wall,
        "prompt_tokens": prompt_tokens[0], "generated_tokens": gen_tokens[0],
        "output_tokens_per_s": gen_tokens[0] / wall, "total_tokens_per_s": (gen_tokens[0] + prompt_tokens[0]) / wall,
        "ttft_ms": {f"p{p}": ms(ttft, p) for p in (50, 90, 99)} | {"mean": 1e3 * statistics.fmean(ttft) if ttft else None},
        "itl_ms": {f"p{p}": ms(itl, p) for p in (50, 90, 99)} | {"mean": 1e3 * statistics.fmean(itl) if itl else None},
        "e2e_s": {f"p{p}": pct(e2e, p) for p in (50, 90, 99)},
    }
    print(f"{a.clients} clients, {len(e2e)}/{a.requests} requests in {wall:.1f} s ({len(errors)} errors)")
    print(f"throughput: {res['requests_per_s']:.2f} req/s, {res['output_tokens_per_s']:.1f} output tok/s, "
          f"{res['total_tokens_per_s']:.1f} total tok/s ({prompt_tokens[0]} prompt + {gen_tokens[0]} generated)")
    for name in ("ttft_ms", "itl_ms"):
        r = res[name]
        print(f"{name}: p50 {r['p50']:.0f}  p90 {r['p90']:.0f}  p99 {r['p99']:.0f}  mean {r['mean'] or float('nan'):.0f}")
    print(f"e2e_s: p50 {res['e2e_s']['p50']:.1f}  p90 {res['e2e_s']['p90']:.1f}  p99 {res['e2e_s']['p99']:.1f}")
    if errors:
        print("first errors:", errors[:3])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
