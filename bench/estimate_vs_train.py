#!/usr/bin/env python3
"""Predicted against measured step time on this machine (issue 35).

Calibrates with `dtsim estimate --calibrate FILE` (single-rank `dtsim train` runs of mlp, moe
and gpt shapes none of the runs below uses, fitted to GEMM FLOPs, activation elements, layers,
parameters and a fixed cost; a 2-rank ring all_reduce's alpha and beta: calibrate.h), then for
each held-out `dtsim train` run prints `dtsim estimate --hardware FILE`'s step time beside
the run's measured median step (`--report`'s seconds_per_step), and the median and worst
|error|. Speed is measured here, never asserted in tests: paste the output, with the load
average it prints, into docs/estimate.md.

  python3 bench/estimate_vs_train.py [build/dtsim] [--steps N] [--repeat R] [--recalibrate]

--repeat R runs each held-out run R times and keeps its fastest median step: on a shared
machine the least disturbed of R is the closest to a quiet one (the calibration keeps the
fastest of 5 of each of its runs). --recalibrate measures
the machine again right before every run, so that a changing load moves both together.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

# (model flags, mesh flags as dtsim train and dtsim estimate spell them, batch)
RUNS = [
    ("--model mlp --dim 128 --hidden 512 --layers 4", "single", 1, 256),
    ("--model mlp --dim 256 --hidden 1024 --layers 2", "single", 1, 128),
    ("--model mlp --dim 256 --hidden 1024 --layers 2", "ddp", 2, 256),
    ("--model mlp --dim 128 --hidden 512 --layers 4", "ddp", 4, 256),
    ("--model mlp --dim 128 --hidden 512 --layers 2", "ddp", 8, 512),
    ("--model mlp --dim 192 --hidden 384 --layers 3", "ddp", 3, 384),
    ("--model mlp --dim 256 --hidden 1024 --layers 2", "zero1", 4, 256),
    ("--model mlp --dim 256 --hidden 1024 --layers 2", "zero3", 2, 256),
    ("--model mlp --dim 256 --hidden 1024 --layers 2", "tp", 2, 256),
    ("--model mlp --dim 128 --hidden 1024 --layers 4", "tp", 4, 128),
    ("--model moe --dim 128 --hidden 512 --experts 4", "single", 1, 256),
    ("--model moe --dim 128 --hidden 512 --experts 4", "ddp", 2, 256),
    ("--model moe --dim 128 --hidden 256 --experts 8", "ep", 4, 512),
    ("--model moe --dim 64 --hidden 512 --experts 4", "ddp", 4, 256),
    ("--model gpt --dim 64 --heads 4 --hidden 256 --layers 2 --seq 32 --vocab 32", "single", 1, 32),
    ("--model gpt --dim 64 --heads 4 --hidden 256 --layers 2 --seq 32 --vocab 32", "ddp", 2, 32),
    ("--model gpt --dim 64 --heads 4 --hidden 256 --layers 2 --seq 32 --vocab 32", "tp", 2, 32),
    ("--model gpt --dim 32 --heads 2 --hidden 128 --layers 3 --seq 24 --vocab 16", "ddp", 4, 64),
    ("--model gpt --dim 128 --heads 4 --hidden 512 --layers 1 --seq 16 --vocab 16", "zero1", 2, 16),
    ("--model mlp --dim 128 --hidden 512 --layers 2", "ddp", 6, 384),
]

# The calibration's shapes (train/estimate/calibrate.cc) are none of these: keep them disjoint.


def mesh_flags(strategy, ranks):
    """dtsim estimate's mesh for a dtsim train strategy on `ranks` ranks."""
    if strategy == "single":
        return []
    if strategy == "ddp":
        return ["--dp", str(ranks)]
    if strategy.startswith("zero"):
        return ["--dp", str(ranks), "--zero", strategy[-1]]
    if strategy == "tp":
        return ["--tp", str(ranks)]
    if strategy == "ep":
        return ["--dp", str(ranks), "--ep", str(ranks)]
    raise ValueError(strategy)


def estimate_model(model):
    """dtsim estimate's spelling of dtsim train's model flags (gpt: --dim is h, --hidden f)."""
    if "--model gpt" not in model:
        return model.split()
    words = model.replace("--hidden", "--ffn").replace("--dim", "--hidden").split()
    return words


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def seconds(text):
    m = re.match(r"([\d.e+-]+) (s|ms|us)$", text.strip())
    return float(m.group(1)) * {"s": 1, "ms": 1e-3, "us": 1e-6}[m.group(2)]


def main():
    args = sys.argv[1:]
    dtsim = "build/dtsim"
    if args and not args[0].startswith("--"):
        dtsim = args.pop(0)
    steps, repeat, recalibrate = 10, 1, False
    while args:
        a = args.pop(0)
        if a == "--steps" and args:
            steps = int(args.pop(0))
        elif a == "--repeat" and args:
            repeat = int(args.pop(0))
        elif a == "--recalibrate":
            recalibrate = True
        else:
            sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        hw = os.path.join(tmp, "here.json")

        def calibrate():  # each calibration run is the fastest of 5 (calibrate.h)
            return run([dtsim, "estimate", "--calibrate", hw])

        print(calibrate())
        print(f"repeat {repeat}, {steps} steps a run")
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
        print(f"{'held-out dtsim train run':58} {'predicted':>10} {'measured':>10} {'error':>8}")
        errors = []
        for model, strategy, ranks, batch in RUNS:
            if recalibrate:
                calibrate()
            train = [dtsim, "train", *model.split(), "--strategy", strategy, "--ranks", str(ranks),
                     "--batch", str(batch), "--steps", str(steps), "--quiet", "--report", "-"]
            measured = min(json.loads(run(train))["seconds_per_step"] for _ in range(repeat))
            data = 1 if strategy in ("single", "tp") else ranks
            est = [dtsim, "estimate", *estimate_model(model), *mesh_flags(strategy, ranks),
                   "--global-batch", str(batch), "--micro-batch", str(batch // data),
                   "--precision", "fp32", "--optimizer", "sgd", "--hardware", hw]
            if "--model gpt" in model:
                est.append("--no-dropout")
            out = run(est)
            predicted = seconds(re.search(r"^step time: (.*)$", out, re.M).group(1))
            err = predicted / measured - 1
            errors.append(abs(err))
            name = f"{strategy} x{ranks} {model.replace('--', '')} B{batch}"
            print(f"{name:58} {predicted * 1e3:7.2f} ms {measured * 1e3:7.2f} ms {100 * err:+7.1f}%",
                  flush=True)
        print(f"\n{len(errors)} runs: median |error| {100 * statistics.median(errors):.1f}%, "
              f"worst {100 * max(errors):.1f}%; load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
