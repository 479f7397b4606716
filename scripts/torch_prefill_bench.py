#!/usr/bin/env python3
"""Dense prefill reference in PyTorch for docs/benchmarks.md (run on a GPU machine with PyTorch).

The same shape as `lserve bench --prefill N` (Llama-3-8B by default), bf16, batch 1, random
weights: a whole-model prefill of N tokens — embedding, per layer rmsnorm, one fused qkv GEMM,
rotary, causal attention by torch.nn.functional.scaled_dot_product_attention (flash / cuDNN
backend, GQA), o-proj, rmsnorm, gate_up GEMM, SiLU, down GEMM — then the final norm and the LM
head of the last row only (as lserve computes it). Prompts longer than --chunk are processed in
chunks whose attention reads the cache of the earlier chunks (so 128K fits in memory); the
default chunk is the whole prompt up to 32K.

Also reported per length: the attention part alone (one layer's causal SDPA over N tokens, median
ms, times the layer count) and its achieved TFLOP/s, counting causal FLOPs as
4 * N^2 / 2 * head_dim * heads (QK^T and PV, the masked half not counted).

  python3 scripts/torch_prefill_bench.py --lengths 4096,32768,131072 --csv torch_prefill.csv
"""
import argparse
import time

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

    def prefill(self, chunk):
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
                    a = F.scaled_dot_product_attention(q, kc[:, :, :t], vc[:, :, :t], is_causal=True, enable_gqa=True)
                else:
                    # Chunk rows attend to the whole prefix and causally within the chunk.
                    mask = torch.ones(t, p0 + t, device=self.dev, dtype=torch.bool).tril(p0)
                    a = F.scaled_dot_product_attention(q, kc[:, :, :p0 + t], vc[:, :, :p0 + t], attn_mask=mask,
                                                       enable_gqa=True)
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
    a = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    s = SHAPES[a.shape]
    hd = s["hidden"] // s["heads"]
    rows = []
    print(f"{'tokens':>8} {'prefill ms':>11} {'tok/s':>9} {'attn ms':>9} {'attn TFLOP/s':>13}")
    for n in [int(x) for x in a.lengths.split(",")]:
        m = Model(s, n, dev, dt)
        with torch.no_grad():
            total = timed(lambda: m.prefill(min(a.chunk, n)), repeats=a.repeats)
            q = torch.randn(1, s["heads"], n, hd, device=dev, dtype=dt)
            k = torch.randn(1, s["kv"], n, hd, device=dev, dtype=dt)
            v = torch.randn(1, s["kv"], n, hd, device=dev, dtype=dt)
            one = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                        repeats=a.repeats)
            del q, k, v
        flops = 4 * n * n / 2 * hd * s["heads"]
        attn = one * s["layers"]
        print(f"{n:>8} {total:>11.1f} {n / total * 1e3:>9.0f} {attn:>9.1f} {flops / one / 1e9:>13.1f}")
        rows.append((a.shape, n, total, attn, flops / one / 1e9))
        del m
        torch.cuda.empty_cache()
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("shape,tokens,prefill_ms,attention_ms,attention_tflops\n")
            for r in rows:
                f.write(",".join(str(x) for x in r) + "\n")


if __name__ == "__main__":
    main()
