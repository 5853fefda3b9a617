#!/usr/bin/python3
"""PyTorch baseline for bench_gpt: the same GPT (learned positions, pre-LN blocks, fused qkv, GELU-tanh
MLP 4x, final LayerNorm, LM head tied to the token embedding), forward + backward per iteration, no
optimizer step. With --train (bench/train/run.sh) each iteration also takes a torch.optim.AdamW step
(lr 3e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.01 on >= 2-D parameters only, no clipping), as
bench_train configures the engine. bf16 runs under torch.autocast('cpu', torch.bfloat16), as users run it.
Last lines: "cpu_tokens_per_s <value>" (per process CPU-second) and "tokens_per_s <value>"."""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, nh):
        super().__init__()
        self.nh = nh
        self.ln_1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = k.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        v = v.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, d, nh, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, d)
        self.wpe = nn.Embedding(T, d)
        self.h = nn.ModuleList([Block(d, nh) for _ in range(L)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--train", action="store_true", help="add a torch.optim.AdamW step to every iteration")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = GPT(a.layers, a.dim, a.heads, a.vocab, a.seq)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq))
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq))

    opt = None
    if a.train:
        params = list(model.parameters())  # unique: the tied weight once
        opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.01},
                                 {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                lr=3e-3, betas=(0.9, 0.95), eps=1e-8)

    def step():
        model.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        if opt is not None:
            opt.step()

    for _ in range(a.warmup):
        step()
    times, cpu_times = [], []
    for _ in range(a.iters):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    med = statistics.median(times)
    n = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__} {a.dtype}{' train (AdamW)' if a.train else ''}, threads={torch.get_num_threads()}, {n} params: "
          f"{1e3 * med:.1f} ms/iter (median of {a.iters}), min {1e3 * min(times):.1f} ms")
    # Process CPU time per step (all threads): robust to other load on a shared host at 1 thread.
    print(f"cpu_tokens_per_s {a.batch * a.seq / statistics.median(cpu_times):.1f}")
    print(f"tokens_per_s {a.batch * a.seq / med:.1f}")


if __name__ == "__main__":
    main()
