#!/usr/bin/env python3
"""PyTorch yardstick for bench/torch_compare.sh: dtsim's MLP, trained the same way.

One residual block  x1 = x + W2 gelu_tanh(W1 x + b1) + b2,  head  y = Wo x1 + bo,  MSE loss,
SGD, fp32; global batch split over N processes (gloo DDP for N > 1), one intra-op thread
per process. Prints one line: `torch ranks N step_ms M cpu_ms C` (medians over the steps
after the warm-up ones of rank 0's wall clock, synchronised by the DDP all-reduce, and of
its main thread's CPU time, which with one intra-op thread is the step's CPU cost at N = 1).

PyTorch is only a yardstick here: nothing in dtsim or its tests uses it.
"""
import argparse
import os
import statistics
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--out", type=int, default=4)
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3, help="steps not timed")
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--set-to-none", action="store_true",
                   help="zero_grad(set_to_none=True) (slower in torch 1.13; default False)")
    a = p.parse_args()
    if a.ranks < 1 or a.batch % a.ranks:
        p.error(f"--batch {a.batch} must be a positive multiple of --ranks {a.ranks}")
    if a.steps <= a.warmup:
        p.error(f"--steps {a.steps} must exceed --warmup {a.warmup}")
    return a


def worker(rank, a):
    import torch
    import torch.nn as nn

    torch.set_num_threads(1)
    torch.manual_seed(1)
    if a.ranks > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                                rank=rank, world_size=a.ranks)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(a.dim, a.hidden)
            self.w2 = nn.Linear(a.hidden, a.dim)
            self.head = nn.Linear(a.dim, a.out)

        def forward(self, x):
            x = x + self.w2(nn.functional.gelu(self.w1(x), approximate="tanh"))
            return self.head(x)

    model = Mlp()
    if a.ranks > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    local = a.batch // a.ranks
    g = torch.Generator().manual_seed(100 + rank)
    xs = [torch.rand(local, a.dim, generator=g) * 2 - 1 for _ in range(4)]
    ts = [torch.rand(local, a.out, generator=g) * 2 - 1 for _ in range(4)]
    times, cpu = [], []
    for step in range(a.steps):
        t0, c0 = time.perf_counter(), time.thread_time()
        opt.zero_grad(set_to_none=a.set_to_none)
        loss = nn.functional.mse_loss(model(xs[step % 4]), ts[step % 4])
        loss.backward()  # DDP all-reduces the gradients (mean) here
        opt.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    if rank == 0:
        ms = statistics.median(times[a.warmup:]) * 1e3
        cpu_ms = statistics.median(cpu[a.warmup:]) * 1e3
        print(f"torch ranks {a.ranks} step_ms {ms:.3f} cpu_ms {cpu_ms:.3f}", flush=True)
    if a.ranks > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


def main():
    a = parse()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if a.ranks == 1:
        worker(0, a)
        return
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(a,), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
