#!/usr/bin/env python3
"""PyTorch yardstick for bench/gpt_vs_torch.sh: dtsim's tiny GPT, trained the same way.

h = wte[x] + wpe (learned positions); per block h += proj(attn(LN(h))) with causal multi-head
attention over a fused QKV Linear, then h += fc2(gelu_tanh(fc1(LN(h)))); logits =
head(LN_f(h)); cross-entropy on the next token; Adam; fp32, one intra-op thread. The
parameter count is that of dtsim's GptModel for the same flags (printed: compare it with
build/bench/gpt_step's). The tokens are the reversal task's shape (random symbols, the
separator, the reversed symbols), made before the timed loop. Prints one line:
`torch_gpt params P step_ms W cpu_ms C loss_first A loss_last Z` (medians over the steps
after the warm-up ones, of wall clock and of the thread's CPU time).

PyTorch is only a yardstick here: nothing in dtsim or its tests uses it.
"""
import argparse
import math
import statistics
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--seq", type=int, default=10)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--vocab", type=int, default=9)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3, help="steps not timed")
    a = p.parse_args()
    if a.dim % a.heads or a.seq < 2 or a.seq % 2 or a.vocab < 3 or a.steps <= a.warmup:
        p.error("need --heads dividing --dim, --seq even >= 2, --vocab >= 3, --steps > --warmup")
    return a


def main():
    a = parse()
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(1)
    hs = a.dim // a.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(a.dim)
            self.qkv = nn.Linear(a.dim, 3 * a.dim)
            self.proj = nn.Linear(a.dim, a.dim)
            self.ln2 = nn.LayerNorm(a.dim)
            self.fc1 = nn.Linear(a.dim, a.hidden)
            self.fc2 = nn.Linear(a.hidden, a.dim)

        def forward(self, h, mask):
            b, s, d = h.shape
            q, k, v = self.qkv(self.ln1(h)).split(d, dim=2)
            q, k, v = (t.view(b, s, a.heads, hs).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
            o = (att @ v).transpose(1, 2).reshape(b, s, d)
            h = h + self.proj(o)
            return h + self.fc2(F.gelu(self.fc1(self.ln2(h)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.dim)
            self.wpe = nn.Parameter(torch.randn(a.seq, a.dim) * 0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.lnf = nn.LayerNorm(a.dim)
            self.head = nn.Linear(a.dim, a.vocab)
            mask = torch.ones(a.seq, a.seq, dtype=torch.bool).triu(1)
            self.register_buffer("mask", mask)

        def forward(self, x):
            h = self.wte(x) + self.wpe
            for blk in self.blocks:
                h = blk(h, self.mask)
            return self.head(self.lnf(h))

    model = Gpt()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    g = torch.Generator().manual_seed(100)
    n = a.seq // 2
    batches = []
    for _ in range(4):
        sym = torch.randint(1, a.vocab, (a.batch, n), generator=g)
        full = torch.cat([sym, torch.zeros(a.batch, 1, dtype=torch.long), sym.flip(1)], dim=1)
        batches.append((full[:, :-1].contiguous(), full[:, 1:].contiguous()))
    times, cpu, losses = [], [], []
    for step in range(a.steps):
        x, y = batches[step % 4]
        t0, c0 = time.perf_counter(), time.thread_time()
        opt.zero_grad(set_to_none=False)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, a.vocab), y.view(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        losses.append(loss.item())
    ms = statistics.median(times[a.warmup:]) * 1e3
    cpu_ms = statistics.median(cpu[a.warmup:]) * 1e3
    print(f"torch_gpt params {params} step_ms {ms:.3f} cpu_ms {cpu_ms:.3f} "
          f"loss_first {losses[0]:.4f} loss_last {losses[-1]:.4f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
