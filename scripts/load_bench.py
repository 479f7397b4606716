#!/usr/bin/env python3
"""Load benchmark for `lserve serve` (not a test): N concurrent clients, each sending streamed
completions back to back (closed loop), with prompts of mixed lengths given in words (text) or in
tokens (random token ids, exact lengths: `--prompt-tokens 32768`). Reports output and total token
throughput, time to first token (TTFT) and inter-token latency (ITL) percentiles, the server's
preemptions during the run and the most sequences it held in its running batch at once (from
/metrics), as text and optionally JSON.

Two HTTP clients, the same requests: the official `openai` package (`--client openai`), or the
standard library's http.client with its own SSE parsing (`--client http`), for machines without
the package or a network to install it. `--client auto` (default) takes `openai` when it imports.

    target/release/lserve serve --device cpu --max-num-seqs 32 &
    python3 scripts/load_bench.py --clients 16 --requests 64 --max-tokens 64

    # long prompts against synthetic Llama-3-8B weights on a GPU (docs/serving.md, "Load test")
    lserve serve --device cuda --synthetic llama3-8b --kv-memory 0.6 --max-num-seqs 64 &
    python3 scripts/load_bench.py --model synthetic-llama3-8b --clients 16 --requests 16 \
        --prompt-tokens 32768 --max-tokens 256 --json out.json
"""
import argparse
import http.client
import json
import random
import re
import statistics
import threading
import time
import urllib.parse
import urllib.request

WORDS = ("the river ran past the old mill where a miller kept seven cats and a ledger of every sack of "
         "grain he ground for the village through the long winter").split()


def prompt_of_words(n_words, rng):
    body = " ".join(rng.choice(WORDS) for _ in range(n_words))
    return f"Summarize the following notes in one sentence.\n\n{body}\n\nSummary:"


def prompt_of_tokens(n_tokens, rng, lo, hi):
    return [rng.randrange(lo, hi) for _ in range(n_tokens)]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stream_openai(a):
    """A function (prompt) -> iterator of (text, usage-or-None) per SSE chunk, via `openai`."""
    from openai import OpenAI

    client = OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=a.timeout)

    def run(prompt):
        s = client.completions.create(model=a.model, prompt=prompt, max_tokens=a.max_tokens, temperature=0,
                                      stream=True, stream_options={"include_usage": True},
                                      extra_body={"ignore_eos": True})
        for chunk in s:
            text = chunk.choices[0].text if chunk.choices else ""
            usage = None
            if chunk.usage is not None:
                usage = {"prompt_tokens": chunk.usage.prompt_tokens,
                         "completion_tokens": chunk.usage.completion_tokens}
            yield text, usage
    return run


def stream_http(a):
    """As `stream_openai`, with http.client and a line-by-line SSE parser (`data: ` lines)."""
    u = urllib.parse.urlsplit(a.base_url)
    if u.scheme != "http":
        raise SystemExit(f"--client http speaks plain http, not {u.scheme}")
    path = u.path.rstrip("/") + "/completions"

    def run(prompt):
        body = json.dumps({"model": a.model, "prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0,
                           "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True})
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=a.timeout)
        try:
            conn.request("POST", path, body=body, headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {a.api_key}"})
            r = conn.getresponse()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {r.read()[:500]!r}")
            while True:
                line = r.readline()
                if not line:
                    raise RuntimeError("the stream ended without [DONE]")
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"error chunk: {chunk['error']}")
                choices = chunk.get("choices") or []
                text = choices[0].get("text", "") if choices else ""
                yield text, chunk.get("usage")
        finally:
            conn.close()
    return run


def scrape_metrics(url, timeout=10):
    """The numbers of /metrics this script reports: preemptions by mode and the running peak."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read().decode()
    except OSError as e:
        return {"error": repr(e)}
    out = {}
    for name, key in (("lserve_preemptions_total{mode=\"swap\"}", "preemptions_swap"),
                      ("lserve_preemptions_total{mode=\"recompute\"}", "preemptions_recompute"),
                      ("lserve_num_requests_running_peak", "peak_running"),
                      ("lserve_kv_cache_pages_total", "kv_pages_total"),
                      ("lserve_generation_tokens_total", "generation_tokens_total")):
        m = re.search("^" + re.escape(name) + r" (\S+)$", text, re.M)
        if m:
            out[key] = float(m.group(1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--client", choices=("auto", "openai", "http"), default="auto")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=64, help="total requests")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", default="16,128,512", help="prompt lengths in words, mixed uniformly")
    ap.add_argument("--prompt-tokens", help="prompt lengths in tokens (k = 1024), mixed uniformly: random "
                    "token ids in [--id-lo, --id-hi) instead of text (overrides --prompt-words)")
    ap.add_argument("--id-lo", type=int, default=1000)
    ap.add_argument("--id-hi", type=int, default=30000)
    ap.add_argument("--warmup", type=int, default=1, help="short requests sent first and not counted "
                    "(the first request of a GPU server compiles kernels)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--label", default="", help="a name for this run in the JSON")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if a.clients < 1 or a.requests < 1 or a.max_tokens < 1:
        raise SystemExit("--clients, --requests and --max-tokens must be at least 1")

    client = a.client
    if client == "auto":
        try:
            import openai  # noqa: F401
            client = "openai"
        except ImportError:
            client = "http"
    stream = stream_openai(a) if client == "openai" else stream_http(a)
    metrics_url = a.base_url.rstrip("/").removesuffix("/v1") + "/metrics"

    rng = random.Random(a.seed)
    if a.prompt_tokens:
        lengths = [int(x[:-1]) * 1024 if x.endswith("k") else int(x) for x in a.prompt_tokens.split(",")]
        jobs = [prompt_of_tokens(rng.choice(lengths), rng, a.id_lo, a.id_hi) for _ in range(a.requests)]
        unit = "tokens"
    else:
        lengths = [int(x) for x in a.prompt_words.split(",")]
        jobs = [prompt_of_words(rng.choice(lengths), rng) for _ in range(a.requests)]
        unit = "words"
    lock = threading.Lock()
    ttft, itl, e2e, decode_rate, gen_tokens, prompt_tokens, errors = [], [], [], [], [0], [0], []
    arrivals = []  # per request: the perf_counter times of its text chunks

    def one(prompt, record=True):
        t0 = time.perf_counter()
        last, first, usage, gaps, times = None, None, None, [], []
        for text, u in stream(prompt):
            if u is not None:
                usage = u
            if text:
                now = time.perf_counter()
                times.append(now)
                if first is None:
                    first = now - t0
                else:
                    gaps.append(now - last)
                last = now
        if not record:
            return
        with lock:
            if first is not None:
                ttft.append(first)
            itl.extend(gaps)
            if times:
                arrivals.append(times)
            e2e.append(time.perf_counter() - t0)
            if usage:
                gen_tokens[0] += usage["completion_tokens"]
                prompt_tokens[0] += usage["prompt_tokens"]
                if last is not None and last - t0 > first and usage["completion_tokens"] > 1:
                    decode_rate.append((usage["completion_tokens"] - 1) / (last - t0 - first))

    for _ in range(a.warmup):
        one(prompt_of_tokens(16, rng, a.id_lo, a.id_hi) if a.prompt_tokens else prompt_of_words(16, rng), False)
    before = scrape_metrics(metrics_url)

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
    after = scrape_metrics(metrics_url)
    delta = lambda k: after.get(k, 0) - before.get(k, 0)  # noqa: E731
    ms = lambda xs, p: 1e3 * pct(xs, p)  # noqa: E731
    # Steady decode: output chunks per second while every request was streaming (from the last
    # first chunk to the first last chunk); meaningful when all requests run at once.
    steady = None
    if arrivals and len(arrivals) == len(e2e):
        lo, hi = max(t[0] for t in arrivals), min(t[-1] for t in arrivals)
        if hi > lo:
            steady = sum(1 for t in arrivals for x in t if lo < x <= hi) / (hi - lo)
    res = {
        "label": a.label, "client": client, "clients": a.clients, "requests": a.requests,
        "max_tokens": a.max_tokens, "prompt_lengths": lengths, "prompt_unit": unit,
        "errors": len(errors), "wall_s": wall, "requests_per_s": len(e2e) / wall,
        "prompt_tokens": prompt_tokens[0], "generated_tokens": gen_tokens[0],
        "output_tokens_per_s": gen_tokens[0] / wall, "total_tokens_per_s": (gen_tokens[0] + prompt_tokens[0]) / wall,
        "ttft_ms": {f"p{p}": ms(ttft, p) for p in (50, 90, 99)} | {"mean": 1e3 * statistics.fmean(ttft) if ttft else None},
        "itl_ms": {f"p{p}": ms(itl, p) for p in (50, 90, 99)} | {"mean": 1e3 * statistics.fmean(itl) if itl else None},
        "e2e_s": {f"p{p}": pct(e2e, p) for p in (50, 90, 99)},
        # Per request: tokens after the first over the time after the first (its streaming rate).
        "decode_tokens_per_s_per_request_p50": pct(decode_rate, 50),
        "steady_decode_tokens_per_s": steady,
        "preemptions_swap": delta("preemptions_swap"), "preemptions_recompute": delta("preemptions_recompute"),
        "peak_running": after.get("peak_running"), "kv_pages_total": after.get("kv_pages_total"),
        "metrics_error": after.get("error"),
    }
    print(f"{a.clients} clients ({client}), {len(e2e)}/{a.requests} requests in {wall:.1f} s ({len(errors)} errors), "
          f"prompts {lengths} {unit}, max_tokens {a.max_tokens}")
    print(f"throughput: {res['requests_per_s']:.2f} req/s, {res['output_tokens_per_s']:.1f} output tok/s, "
          f"{res['total_tokens_per_s']:.1f} total tok/s ({prompt_tokens[0]} prompt + {gen_tokens[0]} generated)")
    for name in ("ttft_ms", "itl_ms"):
        r = res[name]
        print(f"{name}: p50 {r['p50']:.0f}  p90 {r['p90']:.0f}  p99 {r['p99']:.0f}  mean {r['mean'] or float('nan'):.0f}")
    print(f"e2e_s: p50 {res['e2e_s']['p50']:.1f}  p90 {res['e2e_s']['p90']:.1f}  p99 {res['e2e_s']['p99']:.1f}; "
          f"per-request decode p50 {res['decode_tokens_per_s_per_request_p50']:.1f} tok/s; "
          f"steady decode (all streaming) {steady or float('nan'):.1f} tok/s")
    print(f"server: preemptions swap {res['preemptions_swap']:.0f} recompute {res['preemptions_recompute']:.0f}, "
          f"peak running {res['peak_running']}, KV pages {res['kv_pages_total']}"
          + (f" (metrics: {res['metrics_error']})" if res["metrics_error"] else ""))
    if errors:
        print("first errors:", errors[:3])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
