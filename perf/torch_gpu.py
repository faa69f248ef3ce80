#!/usr/bin/env python3
"""The reference workloads through PyTorch on a GPU, timed like kiln-bench.

    python3 perf/torch_gpu.py [--workload chain16|mlp|gpt2|gpt2-decode|all]
                              [--modes eager,default,reduce-overhead]

Latency: wall time of one call including torch.cuda.synchronize(), median of N
calls after 5 warm-up calls; first call: the first call in this process.
Prints one JSON object per line (the same fields as kiln-bench --json).
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


def chain16(x):
    for _ in range(4):
        x = x * 1.0001 + 0.5
        x = torch.sigmoid(x)
        x = x - 0.25
        x = torch.tanh(x)
    return x


class Block(torch.nn.Module):
    def __init__(self, d=768, heads=12):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.c_attn, self.c_proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.c_fc, self.mlp_proj = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, -1)
        hd = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(hd(q), hd(k), hd(v), is_causal=True)
        h = x + self.c_proj(a.transpose(1, 2).reshape(b, t, d))
        return h + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(h)), approximate="tanh"))


class GPT2Hidden(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(12))
        self.ln_f = torch.nn.LayerNorm(768)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x)


class GPT2Decode(torch.nn.Module):
    """One decode step with a static KV cache, as kiln's GPT2::decode_step:
    token + position embeddings, 12 blocks whose key and value are written
    into the cache in place at `pos` (a device tensor), attention over the
    whole cache masked to positions <= pos, final LayerNorm, tied LM head."""

    def __init__(self, batch, length, d=768, heads=12, vocab=50257):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(1024, d)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(12))
        self.ln_f = torch.nn.LayerNorm(d)
        self.heads, self.d = heads, d
        for i in range(12):
            self.register_buffer(f"k{i}", torch.zeros(batch, heads, length, d // heads))
            self.register_buffer(f"v{i}", torch.zeros(batch, heads, length, d // heads))

    def forward(self, ids, pos):
        b = ids.shape[0]
        d, h = self.d, self.heads
        x = self.wte(ids) + self.wpe(pos).view(1, 1, d)
        keep = torch.arange(getattr(self, "k0").shape[2], device=ids.device) <= pos
        hd = lambda z: z.view(b, 1, h, d // h).transpose(1, 2)
        for i, blk in enumerate(self.blocks):
            q, k, v = blk.c_attn(blk.ln_1(x)).split(d, -1)
            kc, vc = getattr(self, f"k{i}"), getattr(self, f"v{i}")
            kc.index_copy_(2, pos, hd(k))
            vc.index_copy_(2, pos, hd(v))
            a = F.scaled_dot_product_attention(hd(q), kc, vc, attn_mask=keep)
            hh = x + blk.c_proj(a.transpose(1, 2).reshape(b, 1, d))
            x = hh + blk.mlp_proj(F.gelu(blk.c_fc(blk.ln_2(hh)), approximate="tanh"))
        return self.ln_f(x) @ self.wte.weight.t()


def cases(workload):
    all_cases = [("chain16", "4096", 4096, 0), ("chain16", "64Mi", 64 << 20, 0),
                 ("mlp", "32x1024", 32, 1024), ("gpt2", "1x1", 1, 1), ("gpt2", "1x128", 1, 128),
                 ("gpt2", "8x128", 8, 128), ("gpt2-decode", "1x1024", 1, 1024),
                 ("gpt2-decode", "8x1024", 8, 1024)]
    return [c for c in all_cases if workload in ("all", c[0])]


def build(name, a, b):
    torch.manual_seed(0)
    dev = "cuda"
    if name == "chain16":
        x = torch.randn(a, device=dev)
        return chain16, (x,), "float32"
    if name == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(dev, torch.bfloat16)
        return m, (torch.randn(a, b, device=dev, dtype=torch.bfloat16),), "bfloat16"
    if name == "gpt2-decode":
        # The position stays at 512, as kiln-bench's, so every call does the same work.
        m = GPT2Decode(a, b).to(dev, torch.float16)
        ids = torch.randint(0, 50257, (a, 1), device=dev)
        pos = torch.full((1,), b // 2, dtype=torch.int64, device=dev)
        return m, (ids, pos), "float16"
    m = GPT2Hidden().to(dev, torch.float16)
    return m, (torch.randn(a, b, 768, device=dev, dtype=torch.float16) * 0.5,), "float16"


def measure(fn, args, iters):
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    us = []
    for _ in range(iters):
        t = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        us.append((time.perf_counter() - t) * 1e6)
    us.sort()
    return statistics.median(us), us[int(len(us) * 0.9)], first_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="all")
    ap.add_argument("--modes", default="eager,default,reduce-overhead")
    ap.add_argument("--iters", type=int, default=0)
    opts = ap.parse_args()
    for name, shape, a, b in cases(opts.workload):
        for mode in opts.modes.split(","):
            torch._dynamo.reset()
            fn, args, dtype = build(name, a, b)
            with torch.inference_mode():
                run = fn if mode == "eager" else torch.compile(fn, mode=mode)
                iters = opts.iters or (20 if a > 1000000 else 200)
                p50, p90, first = measure(run, args, iters)
            print(json.dumps({"workload": name, "shape": shape, "dtype": dtype, "device": "cuda",
                              "mode": "torch-" + mode, "latency_us_p50": round(p50, 2),
                              "latency_us_p90": round(p90, 2), "first_call_ms": round(first, 3)}),
                  flush=True)


if __name__ == "__main__":
    main()
