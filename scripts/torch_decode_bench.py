#!/usr/bin/env python3
"""Dense decode reference in PyTorch for docs/benchmarks.md (run on a GPU machine with PyTorch).

For the same shapes as `lserve bench` (Llama-3-8B by default: 32 layers, hidden 4096, 32 query
heads, 8 KV heads, head_dim 128, FFN 14336, vocab 128256; bf16, batch 1), at each context length:

  attention  one layer's dense decode attention (q [1, 32, 1, 128] over K/V [1, 8, ctx, 128],
             torch.nn.functional.scaled_dot_product_attention with enable_gqa), median ms
  step       a whole dense decode step: embedding, 32 x (rmsnorm, qkv GEMV, rotary, attention
             over a contiguous KV cache of `ctx` tokens, o-proj, rmsnorm, gate_up, SiLU, down),
             final norm, LM head, argmax; captured once as a CUDA graph and replayed, median ms

  gemv       (once) only the step's weight products — per layer qkv, o, gate_up and down, then
             the LM head — as bf16 x @ W^T with one row of x (cuBLAS's decode GEMV), graph-captured:
             the reference for lserve's own GEMV kernels (`lserve bench --profile`, the matmul_gemv_* rows)

plus the bandwidth floor of the step: (weight bytes + KV bytes) / --bandwidth (4.2 TB/s on the
H200). Weights and caches are random (synthetic), as in lserve's bench. Output: one line per
context and a CSV (--csv) in the `lserve bench --compare` layout (docs/benchmarks.md): label,
shape, context, ms_per_token (the whole step), attention_ms, floor_ms.

  python3 scripts/torch_decode_bench.py --contexts 4096,32768,131072 --csv torch.csv
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


def median_ms(fn, warmup=3, repeats=20):
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
    def __init__(self, s, ctx, dev, dt, batch=1):
        h, hd = s["hidden"], s["hidden"] // s["heads"]
        self.s, self.hd, self.ctx, self.b = s, hd, ctx, batch
        r = lambda *shape, scale=0.02: (torch.randn(*shape, device=dev, dtype=dt) * scale)
        self.embed = r(s["vocab"], h)
        self.lm_head = r(s["vocab"], h)
        self.layers = []
        for _ in range(s["layers"]):
            self.layers.append(dict(
                wqkv=r((s["heads"] + 2 * s["kv"]) * hd, h), wo=r(h, s["heads"] * hd),
                wgu=r(2 * s["ffn"], h), wd=r(h, s["ffn"]),
                n1=torch.ones(h, device=dev, dtype=dt), n2=torch.ones(h, device=dev, dtype=dt),
                k=r(batch, s["kv"], ctx + 1, hd, scale=1.0), v=r(batch, s["kv"], ctx + 1, hd, scale=1.0)))
        self.norm = torch.ones(h, device=dev, dtype=dt)
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
        ang = ctx * inv
        self.cos = torch.cat([ang.cos(), ang.cos()]).to(dt)
        self.sin = torch.cat([ang.sin(), ang.sin()]).to(dt)
        self.tok = torch.zeros(batch, dtype=torch.long, device=dev)

    def weight_bytes(self):
        n = self.embed.numel() + self.lm_head.numel() + self.norm.numel()
        for l in self.layers:
            n += sum(l[x].numel() for x in ("wqkv", "wo", "wgu", "wd", "n1", "n2"))
        return n * self.embed.element_size()

    def kv_bytes(self):
        return sum(l["k"].numel() + l["v"].numel() for l in self.layers) * self.embed.element_size()

    def projections(self, x, xf):
        for l in self.layers:
            x @ l["wqkv"].t()
            x @ l["wo"].t()
            x @ l["wgu"].t()
            xf @ l["wd"].t()
        return x @ self.lm_head.t()

    def rope(self, x):
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos + rot * self.sin

    def step(self):
        s, hd, b = self.s, self.hd, self.b
        x = self.embed[self.tok]
        for l in self.layers:
            y = F.rms_norm(x, (x.shape[-1],), l["n1"], 1e-5)
            qkv = y @ l["wqkv"].t()
            q, k, v = qkv.split([s["heads"] * hd, s["kv"] * hd, s["kv"] * hd], dim=-1)
            q = self.rope(q.view(b, s["heads"], 1, hd))
            k = self.rope(k.view(b, s["kv"], 1, hd))
            l["k"][:, :, self.ctx:self.ctx + 1] = k
            l["v"][:, :, self.ctx:self.ctx + 1] = v.view(b, s["kv"], 1, hd)
            a = F.scaled_dot_product_attention(q, l["k"], l["v"], enable_gqa=True)
            x = x + a.reshape(b, -1) @ l["wo"].t()
            y = F.rms_norm(x, (x.shape[-1],), l["n2"], 1e-5)
            g, u = (y @ l["wgu"].t()).chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ l["wd"].t()
        x = F.rms_norm(x, (x.shape[-1],), self.norm, 1e-5)
        return (x @ self.lm_head.t()).argmax(-1)


def batch_steps(s, contexts, batches, dev, dt, max_kv_gb):
    """Dense batched decode steps (graph-captured), median ms, where the KV cache fits."""
    hd = s["hidden"] // s["heads"]
    print(f"{'context':>8} {'batch':>6} {'step ms':>9} {'ms/token':>9}")
    rows = []
    for ctx in contexts:
        for b in batches:
            kv_gb = 2 * s["layers"] * b * s["kv"] * (ctx + 1) * hd * 2 / 1e9
            if kv_gb > max_kv_gb:
                print(f"{ctx:>8} {b:>6}   skipped: {kv_gb:.0f} GB of KV")
                continue
            m = Model(s, ctx, dev, dt, batch=b)
            with torch.no_grad():
                m.step()
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    m.step()
                step = median_ms(graph.replay)
            print(f"{ctx:>8} {b:>6} {step:>9.3f} {step / b:>9.3f}")
            rows.append((ctx, b, step))
            del m, graph
            torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--contexts", default="4096,32768,131072")
    ap.add_argument("--bandwidth", type=float, default=4200.0, help="GB/s for the floor column")
    ap.add_argument("--csv")
    ap.add_argument("--batch", default="", help="also time dense batched steps, e.g. 1,8,16 (at --contexts)")
    ap.add_argument("--max-kv-gb", type=float, default=100.0, help="skip batch points whose KV exceeds this")
    a = ap.parse_args()
    torch_env.print_versions()
    dev, dt = "cuda", torch.bfloat16
    s = SHAPES[a.shape]
    hd = s["hidden"] // s["heads"]
    rows = []
    print(f"{'context':>8} {'attn ms':>9} {'step ms':>9} {'floor ms':>9} {'of floor':>9}")
    for ctx in [int(c) for c in a.contexts.split(",")]:
        q = torch.randn(1, s["heads"], 1, hd, device=dev, dtype=dt)
        k = torch.randn(1, s["kv"], ctx, hd, device=dev, dtype=dt)
        v = torch.randn(1, s["kv"], ctx, hd, device=dev, dtype=dt)
        attn = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        del q, k, v
        m = Model(s, ctx, dev, dt)
        with torch.no_grad():
            m.step()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                m.step()
            step = median_ms(graph.replay)
        floor = (m.weight_bytes() + m.kv_bytes()) / (a.bandwidth * 1e9) * 1e3
        print(f"{ctx:>8} {attn:>9.3f} {step:>9.3f} {floor:>9.3f} {100 * floor / step:>8.1f}%")
        rows.append(("PyTorch dense step", a.shape, ctx, step, attn, floor))
        if len(rows) == 1:
            with torch.no_grad():
                x = torch.randn(1, s["hidden"], device=dev, dtype=dt)
                xf = torch.randn(1, s["ffn"], device=dev, dtype=dt)
                m.projections(x, xf)
                torch.cuda.synchronize()
                g2 = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g2):
                    m.projections(x, xf)
                gemv = median_ms(g2.replay)
            wb = m.weight_bytes() - m.embed.numel() * m.embed.element_size()
            print(f"gemv: cuBLAS bf16 projections of one step (m=1) {gemv:.3f} ms for {wb / 1e9:.2f} GB "
                  f"= {wb / gemv / 1e9:.2f} TB/s")
            del g2
        del m, graph
        torch.cuda.empty_cache()
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("label,shape,context,ms_per_token,attention_ms,floor_ms\n")
            for r in rows:
                f.write(",".join(str(x) for x in r) + "\n")
    if a.batch:
        brows = batch_steps(s, [int(c) for c in a.contexts.split(",")], [int(b) for b in a.batch.split(",")], dev, dt,
                            a.max_kv_gb)
        if a.csv:
            with open(a.csv.replace(".csv", "_batch.csv"), "w") as f:
                f.write("shape,context,batch,step_ms\n")
                for ctx, b, step in brows:
                    f.write(f"{a.shape},{ctx},{b},{step}\n")


if __name__ == "__main__":
    main()
