#!/usr/bin/env python3
"""Predicted against measured step time on this machine (issue 35).

Each of R rounds calibrates with `dtsim estimate --calibrate FILE` (single-rank `dtsim train`
runs of mlp, moe and gpt shapes none of the runs below uses, alone on one core, on all, and
as ddp on 1, 2 and 4 times as many rank threads as cores, plus a cp and an ep run:
calibrate.h) and, when mpirun is here, `mpirun -np 2 dtsim estimate --calibrate MPI_FILE
--hardware FILE` (the links and ddp steps of a 2-process job); then runs every held-out `dtsim train` run once (threads, or under mpirun)
and predicts it with `dtsim estimate --hardware` on that round's file. Each run's error is
the median over the rounds of predicted / measured - 1 (measured: `--report`'s
seconds_per_step, the median step): a round's calibration and runs see the machine in the
same state, so a shared machine's slow minutes move both. Prints each run's median
predicted and measured step beside its error and the range of the rounds' errors, then the
median and worst |error|. Speed is
measured here, never asserted in tests: paste the output, with the load average it prints,
into docs/estimate.md.

  python3 bench/estimate_vs_train.py [build/dtsim] [--steps N] [--repeat R]   (40, 9)
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# (model flags, strategy, ranks, batch, processes): processes > 1 runs under mpirun, ranks /
# processes rank threads in each. Strategies as dtsim train spells them, plus pp N (4
# micro-batches), cp N and tp-sp N (gpt: --tp N --sequence-parallel).
MLP = "--model mlp --dim {} --hidden {} --layers {}"
GPT = "--model gpt --dim {} --heads {} --hidden {} --layers {} --seq {} --vocab {}"
RUNS = [
    (MLP.format(128, 512, 4), "single", 1, 256, 1),
    (MLP.format(256, 1024, 2), "single", 1, 128, 1),
    (MLP.format(256, 1024, 2), "ddp", 2, 256, 1),
    (MLP.format(128, 512, 4), "ddp", 4, 256, 1),
    (MLP.format(128, 512, 2), "ddp", 8, 512, 1),
    (MLP.format(192, 384, 3), "ddp", 3, 384, 1),
    (MLP.format(256, 1024, 2), "zero1", 4, 256, 1),
    (MLP.format(256, 1024, 2), "zero3", 2, 256, 1),
    (MLP.format(256, 1024, 2), "tp", 2, 256, 1),
    (MLP.format(128, 1024, 4), "tp", 4, 128, 1),
    (MLP.format(256, 1024, 4), "pp", 2, 256, 1),
    ("--model moe --dim 128 --hidden 512 --experts 4", "single", 1, 256, 1),
    ("--model moe --dim 128 --hidden 512 --experts 4", "ddp", 2, 256, 1),
    ("--model moe --dim 128 --hidden 256 --experts 8", "ep", 4, 512, 1),
    ("--model moe --dim 64 --hidden 512 --experts 4", "ddp", 4, 256, 1),
    (GPT.format(64, 4, 256, 2, 32, 32), "single", 1, 32, 1),
    (GPT.format(64, 4, 256, 2, 32, 32), "ddp", 2, 32, 1),
    (GPT.format(64, 4, 256, 2, 32, 32), "tp", 2, 32, 1),
    (GPT.format(64, 4, 256, 2, 32, 32), "tp-sp", 2, 32, 1),
    (GPT.format(64, 4, 256, 2, 32, 32), "cp", 2, 32, 1),
    (GPT.format(32, 2, 128, 3, 24, 16), "ddp", 4, 64, 1),
    (GPT.format(128, 4, 512, 1, 16, 16), "zero1", 2, 16, 1),
    (MLP.format(128, 512, 2), "ddp", 6, 384, 1),
    (MLP.format(256, 1024, 2), "ddp", 2, 256, 2),
    (MLP.format(128, 1024, 4), "tp", 2, 128, 2),
    (GPT.format(128, 4, 512, 1, 16, 16), "zero1", 2, 16, 2),
    (MLP.format(128, 512, 4), "ddp", 4, 256, 2),
]
MICRO_BATCHES = 4  # pp runs

# The calibration's shapes (train/estimate/calibrate.cc) are none of these: keep them disjoint.


def train_flags(strategy, ranks):
    """dtsim train's flags for a strategy on `ranks` ranks."""
    if strategy == "pp":
        return ["--pp", str(ranks), "--micro-batches", str(MICRO_BATCHES)]
    if strategy == "cp":
        return ["--cp", str(ranks)]
    if strategy == "tp-sp":
        return ["--tp", str(ranks), "--sequence-parallel"]
    return ["--strategy", strategy, "--ranks", str(ranks)]


def mesh_flags(strategy, ranks, batch):
    """dtsim estimate's mesh and batch flags for a dtsim train strategy on `ranks` ranks."""
    data = ranks if strategy in ("ddp", "ep") or strategy.startswith("zero") else 1
    micro = batch // data // (MICRO_BATCHES if strategy == "pp" else 1)
    out = ["--global-batch", str(batch), "--micro-batch", str(micro)]
    if strategy in ("single",):
        return out
    if strategy == "ddp":
        return out + ["--dp", str(ranks)]
    if strategy.startswith("zero"):
        return out + ["--dp", str(ranks), "--zero", strategy[-1]]
    if strategy == "tp":
        return out + ["--tp", str(ranks)]
    if strategy == "tp-sp":
        return out + ["--tp", str(ranks), "--sequence-parallel"]
    if strategy in ("pp", "cp"):
        return out + [f"--{strategy}", str(ranks)]
    if strategy == "ep":
        return out + ["--dp", str(ranks), "--ep", str(ranks)]
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
    steps, repeat = 40, 9
    while args:
        a = args.pop(0)
        if a == "--steps" and args:
            steps = int(args.pop(0))
        elif a == "--repeat" and args:
            repeat = int(args.pop(0))
        else:
            sys.exit(__doc__)
    mpirun = shutil.which("mpirun")
    mpi = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np"] if mpirun else None
    runs = [r for r in RUNS if r[4] == 1 or mpi]
    with tempfile.TemporaryDirectory() as tmp:
        hw, mpi_hw = os.path.join(tmp, "here.json"), os.path.join(tmp, "mpi.json")
        report = os.path.join(tmp, "report.json")

        def calibrate():
            out = run([dtsim, "estimate", "--calibrate", hw])
            if mpi:  # the links of a 2-process job; compute from the thread calibration
                out += run(mpi + ["2", dtsim, "estimate", "--calibrate", mpi_hw, "--hardware", hw])
            return out

        def predict(model, strategy, ranks, batch, processes):
            est = [dtsim, "estimate", *estimate_model(model), *mesh_flags(strategy, ranks, batch),
                   "--precision", "fp32", "--optimizer", "sgd", "--hardware",
                   mpi_hw if processes > 1 else hw]
            if "--model gpt" in model:
                est.append("--no-dropout")
            return seconds(re.search(r"^step time: (.*)$", run(est), re.M).group(1))

        def measure(model, strategy, ranks, batch, processes):
            train = [dtsim, "train", *model.split(), *train_flags(strategy, ranks), "--batch",
                     str(batch), "--steps", str(steps), "--quiet", "--report", report]
            if processes > 1:
                train = mpi + [str(processes), *train, "--threads-per-process",
                               str(ranks // processes)]
            run(train)
            with open(report) as f:
                return json.load(f)["seconds_per_step"]

        print(f"{repeat} rounds, each a calibration and then every held-out run ({steps} steps)")
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
        predicted = [[] for _ in runs]
        measured = [[] for _ in runs]
        for r in range(repeat):
            out = calibrate()
            if r == 0:
                print(out)
            for i, spec in enumerate(runs):
                measured[i].append(measure(*spec))
                predicted[i].append(predict(*spec))
        print(f"{'held-out dtsim train run':64} {'predicted':>10} {'measured':>10} {'error':>8}"
              f"  {'rounds':>13}")
        errors = []
        for i, (model, strategy, ranks, batch, processes) in enumerate(runs):
            each = [p / m - 1 for p, m in zip(predicted[i], measured[i])]
            err = statistics.median(each)
            errors.append(abs(err))
            where = f"mpirun -np {processes} x {ranks // processes}" if processes > 1 else "threads"
            name = (f"{strategy} x{ranks} {where} "
                    f"{model.replace('--model ', '').replace('--', '')} B{batch}")
            print(f"{name:64} {statistics.median(predicted[i]) * 1e3:7.2f} ms "
                  f"{statistics.median(measured[i]) * 1e3:7.2f} ms {100 * err:+7.1f}%  "
                  f"{100 * min(each):+5.0f}..{100 * max(each):+4.0f}%", flush=True)
        print(f"\n{len(errors)} runs: median |error| {100 * statistics.median(errors):.1f}%, "
              f"worst {100 * max(errors):.1f}%; load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
