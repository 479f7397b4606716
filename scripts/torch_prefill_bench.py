#!/usr/bin/env python3
"""Dense prefill reference in PyTorch for docs/benchmarks.md (run on a GPU machine with PyTorch).

The same shape as `lserve bench --prefill N` (Llama-3-8B by default), bf16, batch 1, random
weights: a whole-model prefill of N tokens — embedding, per layer rmsnorm, one fused qkv GEMM,
rotary, causal attention by torch.nn.functional.scaled_dot_product_attention (GQA), o-proj, rmsnorm, gate_up GEMM, SiLU, down GEMM — then the final norm and the LM
head of the last row only (as lserve computes it). Prompts longer than --chunk are processed in
chunks whose attention reads the cache of the earlier chunks (so 128K fits in memory); the
default chunk is the whole prompt up to 32K.

Also reported per length: the attention part alone (one layer's causal SDPA over N tokens, median
ms, times the layer count) and its achieved TFLOP/s, counting causal FLOPs as
4 * N^2 / 2 * head_dim * heads (QK^T and PV, the masked half not counted).

The SDPA backend is chosen, not left to PyTorch's dispatcher: which backend the dispatcher picks
for `enable_gqa=True` changed between the PyTorch builds of the GPU machine (SDPA at 32K went
from ~650 to ~325 TFLOP/s between 2026-12-02 04:45 and 10:10 UTC, docs/benchmarks.md), so the
anchor moved by 1.3x without a line of ours changing. `--sdpa best` (the default) times one
layer's causal attention at each length with every backend that accepts it — cuDNN, flash,
memory-efficient; with `enable_gqa=True`, and where a backend refuses that, with K/V repeated to
all query heads (the repeat is inside the timed call) — prints each, and runs the whole-model
prefill with the fastest. `--sdpa cudnn|flash|efficient|math|default` forces one (`default`: the
dispatcher's choice, the script's behaviour before 2026-12-06). The versions of torch, CUDA and
cuDNN are printed first.

  python3 scripts/torch_prefill_bench.py --lengths 4096,32768,131072 --csv torch_prefill.csv
"""
import argparse
import time

import torch_env

torch_env.outside_cuda_env()

import torch
import torch.nn.functional as F

SHAPES = {
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv=8, ffn=14336, vocab=128256),
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, kv=32, ffn=11008, vocab=32000),
    "qwen2.5-7b": dict(layers=28, hidden=3584, heads=28, kv=4, ffn=18944, vocab=152064),
    "smollm2-135m": dict(layers=30, hidden=576, heads=9, kv=3, ffn=1536, vocab=49152),
}


def timed(fn, warmup=1, repeats=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2]


BACKENDS = ["cudnn", "flash", "efficient", "math"]


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]


def make_attn(name, gqa):
    """SDPA restricted to backend `name` ('default': the dispatcher); `gqa` False repeats K/V."""
    def attn(q, k, v, **kw):
        if not gqa and k.shape[1] != q.shape[1]:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        extra = {"enable_gqa": True} if gqa else {}
        if name == "default":
            return F.scaled_dot_product_attention(q, k, v, **kw, **extra)
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel([sdpa_backend(name)]):
            return F.scaled_dot_product_attention(q, k, v, **kw, **extra)
    return attn


def candidates(choice):
    names = BACKENDS[:3] if choice == "best" else [choice]
    return [(n, g) for n in names for g in (True, False)]


class Model:
    def __init__(self, s, n, dev, dt):
        h, hd = s["hidden"], s["hidden"] // s["heads"]
        self.s, self.hd, self.n, self.dev, self.dt = s, hd, n, dev, dt
        r = lambda *shape: torch.randn(*shape, device=dev, dtype=dt) * 0.02
        self.embed = r(s["vocab"], h)
        self.lm_head = r(s["vocab"], h)
        self.layers = [dict(wqkv=r((s["heads"] + 2 * s["kv"]) * hd, h), wo=r(h, s["heads"] * hd),
                            wgu=r(2 * s["ffn"], h), wd=r(h, s["ffn"]),
                            n1=torch.ones(h, device=dev, dtype=dt), n2=torch.ones(h, device=dev, dtype=dt))
                       for _ in range(s["layers"])]
        self.norm = torch.ones(h, device=dev, dtype=dt)
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
        ang = torch.arange(n, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(dt)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(dt)
        self.tokens = torch.randint(0, s["vocab"], (n,), device=dev)

    def rope(self, x, p0):
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        c, s = self.cos[p0:p0 + x.shape[-2]], self.sin[p0:p0 + x.shape[-2]]
        return x * c + rot * s

    def prefill(self, chunk, attn):
        s, hd, n = self.s, self.hd, self.n
        caches = [(torch.empty(1, s["kv"], n, hd, device=self.dev, dtype=self.dt),
                   torch.empty(1, s["kv"], n, hd, device=self.dev, dtype=self.dt)) for _ in self.layers]
        last = None
        for p0 in range(0, n, chunk):
            t = min(chunk, n - p0)
            x = self.embed[self.tokens[p0:p0 + t]]
            for l, (kc, vc) in zip(self.layers, caches):
                y = F.rms_norm(x, (x.shape[-1],), l["n1"], 1e-5)
                q, k, v = (y @ l["wqkv"].t()).split([s["heads"] * hd, s["kv"] * hd, s["kv"] * hd], dim=-1)
                q = self.rope(q.view(t, s["heads"], hd).transpose(0, 1)[None], p0)
                kc[:, :, p0:p0 + t] = self.rope(k.view(t, s["kv"], hd).transpose(0, 1)[None], p0)
                vc[:, :, p0:p0 + t] = v.view(t, s["kv"], hd).transpose(0, 1)[None]
                if p0 == 0:
                    a = attn(q, kc[:, :, :t], vc[:, :, :t], is_causal=True)
                else:
                    # Chunk rows attend to the whole prefix and causally within the chunk.
                    mask = torch.ones(t, p0 + t, device=self.dev, dtype=torch.bool).tril(p0)
                    a = attn(q, kc[:, :, :p0 + t], vc[:, :, :p0 + t], attn_mask=mask)
                x = x + a[0].transpose(0, 1).reshape(t, -1) @ l["wo"].t()
                y = F.rms_norm(x, (x.shape[-1],), l["n2"], 1e-5)
                g, u = (y @ l["wgu"].t()).chunk(2, dim=-1)
                x = x + (F.silu(g) * u) @ l["wd"].t()
            last = x[-1:]
        x = F.rms_norm(last, (last.shape[-1],), self.norm, 1e-5)
        return (x @ self.lm_head.t()).argmax(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--lengths", default="4096,32768")
    ap.add_argument("--chunk", type=int, default=32768, help="tokens per prefill chunk")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--csv")
    ap.add_argument("--sdpa", default="best", choices=["best", "default"] + BACKENDS,
                    help="SDPA backend: the fastest of cudnn/flash/efficient per length (best), the dispatcher's "
                         "choice (default), or one named")
    a = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    s = SHAPES[a.shape]
    hd = s["hidden"] // s["heads"]
    torch_env.print_versions()
    rows = []
    for n in [int(x) for x in a.lengths.split(",")]:
        flops = 4 * n * n / 2 * hd * s["heads"]
        q = torch.randn(1, s["heads"], n, hd, device=dev, dtype=dt)
        k = torch.randn(1, s["kv"], n, hd, device=dev, dtype=dt)
        v = torch.randn(1, s["kv"], n, hd, device=dev, dtype=dt)
        cands = [("default", True)] if a.sdpa == "default" else candidates(a.sdpa)
        timings = []
        with torch.no_grad():
            for name, gqa in cands:
                if any(t[0] == name for t in timings):
                    continue  # the backend took enable_gqa: the repeated-K/V form is not needed
                f = make_attn(name, gqa)
                try:
                    one = timed(lambda: f(q, k, v, is_causal=True), repeats=a.repeats)
                except RuntimeError as e:
                    print(f"  {n} sdpa {name} gqa={gqa}: not available ({str(e).splitlines()[0][:100]})")
                    continue
                timings.append((name, gqa, one))
                print(f"  {n} sdpa {name:<9} gqa={'native' if gqa else 'repeat'}: {one:8.3f} ms/layer "
                      f"{flops / one / 1e9:7.1f} TFLOP/s")
        del q, k, v
        if not timings:
            raise SystemExit(f"no SDPA backend ran at {n} tokens")
        name, gqa, one = min(timings, key=lambda t: t[2])
        m = Model(s, n, dev, dt)
        with torch.no_grad():
            total = timed(lambda: m.prefill(min(a.chunk, n), make_attn(name, gqa)), repeats=a.repeats)
        attn = one * s["layers"]
        label = f"{name}/{'gqa' if gqa else 'repeat'}"
        rows.append((a.shape, n, total, attn, flops / one / 1e9, label))
        del m
        torch.cuda.empty_cache()
    print(f"{'tokens':>8} {'prefill ms':>11} {'tok/s':>9} {'attn ms':>9} {'attn TFLOP/s':>13}  sdpa")
    for shape, n, total, attn, tf, label in rows:
        print(f"{n:>8} {total:>11.1f} {n / total * 1e3:>9.0f} {attn:>9.1f} {tf:>13.1f}  {label}")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("shape,tokens,prefill_ms,attention_ms,attention_tflops,sdpa\n")
            for r in rows:
                f.write(",".join(str(x) for x in r) + "\n")


if __name__ == "__main__":
    main()
