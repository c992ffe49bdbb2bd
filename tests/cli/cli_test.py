#!/usr/bin/env python3
"""Drives the dtsim binary for ctest: cli_test.py DTSIM CASE. Each case runs the binary,
checks exit codes and the shape of its output (and of the --report and --trace files), and
exits non-zero with a message naming what differed."""
import json
import os
import re
import subprocess
import sys
import tempfile

from bad_inputs import BAD  # the bad-input table, beside this file

from cli_util import DTSIM, expect, expect_match, run
from pipeline_cases import (case_train_ep_adam, case_train_mesh_combinations,
                            case_train_pipeline, case_walk_pipeline, case_walk_sequence)
from checkpoint_cases import (case_checkpoint_bad_inputs, case_checkpoint_check_resume,
                              case_checkpoint_consolidate, case_checkpoint_crash,
                              case_checkpoint_crash_mpi, case_checkpoint_mpi_reshard)
from output_cases import case_no_partial_files, case_output_files, case_signals
from newcomer_cases import (case_dry_run, case_headers, case_newcomer_texts, case_pipeline_hint,
                            case_terminal_width)


def case_help():
    for cmd in ["demo", "train", "walk", "estimate", "stress"]:
        for flag in ["--help", "-h"]:
            rc, out, err = run(cmd, flag)
            expect(rc == 0 and err == "", f"{cmd} {flag} exit code {rc}, stderr {err!r}")
            expect_match(rf"^example: dtsim {cmd}\b", out, f"{cmd} {flag}")
    for args in [["--help"], ["-h"], ["help"]]:
        rc, out, _ = run(*args)
        expect(rc == 0, f"dtsim {args}")
        for cmd in ["demo", "train", "walk", "estimate", "stress"]:
            expect_match(rf"^  {cmd} ", out, "dtsim --help lists " + cmd)
    rc, out, err = run()
    expect(rc == 2 and out == "" and "train" in err, "no command: the list on stderr, exit 2")
    # Defaults and choices are generated from the flags themselves.
    rc, out, _ = run("train", "-h")
    expect_match(r"--precision \{fp32\|bf16\}=fp32", out, "train -h shows --precision's default")
    expect_match(r"--ranks INT in \[1, 256\]=4 \(Env:WORLD_SIZE\)", out, "train -h --ranks")
    expect_match(r"--strategy \{single\|accum\|ddp\|zero1\|zero2\|zero3\|tp\|ep\|dp-tp\}=ddp", out,
                 "train -h --strategy")
    # --algo offers only what the command's collectives have (barrier's dissemination is not
    # an all_reduce algorithm), and every name it offers is accepted.
    for cmd, extra in [("train", ["--steps", "1", "--quiet"]), ("walk", [])]:
        rc, out, _ = run(cmd, "-h")
        m = re.search(r"--algo \{([a-z|]+)\}", out)
        expect(m is not None and "dissemination" not in m.group(1), f"{cmd} -h --algo: {m}")
        if cmd == "train":
            for name in m.group(1).split("|"):
                if name == "mpi":
                    continue  # needs mpirun
                rc, _, err = run(cmd, *extra, "--algo", name)
                expect(rc == 0, f"train --algo {name} (offered by -h): exit {rc} {err!r}")


def case_version():
    rc, out, err = run("--version")
    expect(rc == 0 and err == "", f"--version exit code {rc}")
    expect_match(r"^dtsim \d+\.\d+\.\d+ \(C\+\+20, GCC [\d.]+; CLI11 [\d.]+, fmt [\d.]+; "
                 r"GEMM (avx2-fma|avx512-fma|openblas)\)$", out,
                 "--version")


def case_estimate():
    rc, out, _ = run("estimate", "--params", "7e9", "--ranks", "8")
    expect(rc == 0, f"estimate exit code {rc}")
    # Stage 0 row: 14 GB weights and gradients, 28 GB each of master, m, v; 112 GB, 16 B/param,
    # 24.5 GB sent per step.
    expect_match(r"^  0 \(DDP\) +14 GB +14 GB +28 GB +28 GB +28 GB +112 GB +16 +24\.5 GB$", out,
                 "stage 0 row")
    expect_match(r"^  3 \(\+ weights\) .* 14 GB +2 +36\.75 GB$", out, "stage 3 row")
    rc, out, _ = run("estimate", "--params", "1e6", "--ranks", "4", "--stage", "2")
    expect(rc == 0 and out.count("(+ grads)") == 1 and "(DDP)" not in out.split("\n\n")[1],
           "--stage 2 shows one row:\n" + out)
    # --params takes a model card's suffix; --zero alone picks the table's row (issue 36).
    rc, out, _ = run("estimate", "--params", "7B", "--ranks", "8", "--stage", "3")
    rc2, out2, _ = run("estimate", "--params", "7e9", "--ranks", "8", "--zero", "3")
    expect(rc == 0 and rc2 == 0 and out == out2 and "7e+09 params, 8 ranks" in out
           and out.count("(+ weights)") == 1, f"--params 7B / --zero 3 alone:\n{out}\n{out2}")
    rc, out, _ = run("estimate", "--params", "7e9", "--tp", "2")
    expect(rc == 0 and "= 2 devices" in out and "bubble: none (one stage" in out
           and "0/1" not in out, f"mesh without a pipeline:\n{out}")
    rc, out, _ = run("estimate", "--params", "7e9", "--zero", "1", "--stage", "2")
    expect(rc == 2 and "give one of them" in out + _, "--zero and --stage together")
    # Without mesh flags the output is what it was before the mesh existed, to the byte.
    rc, out, _ = run("estimate", "--params", "7e9", "--ranks", "8")
    expect(out == FLAT_ESTIMATE, "flat estimate changed:\n" + out)
    # The mesh: a device's slice of the model, ZeRO along dp, the pipeline from its schedule.
    rc, out, _ = run("estimate", "--params", "7e9", "--dp", "2", "--tp", "2", "--pp", "4",
                     "--zero", "1", "--micro-batches", "8", "--activations", "16e9")
    expect(rc == 0, f"mesh estimate exit code {rc}")
    expect_match(r"^dtsim estimate: 7e\+09 params on a mesh of dp 2 x tp 2 x pp 4 = 16 devices", out,
                 "mesh header")
    expect_match(r"^  ZeRO-1 +1\.75 GB +1\.75 GB +1\.75 GB +1\.75 GB +1\.75 GB +8\.75 GB +10 +1\.75 GB$",
                 out, "mesh state row")
    expect_match(r"^pipeline bubble: 3/11 of the slots idle \(27\.3%\).* = 3/11$", out, "bubble")
    expect_match(r"^  stage 0: 4 in flight = 16 GB$", out, "1f1b stage 0: 4 x A/4")
    expect_match(r"^  stage 3: 1 in flight = 4 GB$", out, "1f1b stage 3: 1 x A/4")
    expect_match(r"^largest device: 8\.75 GB of model state \+ 16 GB of activations = 24\.75 GB$",
                 out, "largest device")
    rc, out, _ = run("estimate", "--params", "1e9", "--pp", "4", "--micro-batches", "8",
                     "--schedule", "interleaved", "--virtual-stages", "2")
    expect(rc == 0 and re.search(r"^pipeline bubble: 3/19 ", out, re.M), f"interleaved:\n{out}")
    expect_match(r"^  stage 0: 11 in flight$", out, "interleaved in-flight chunks")


FLAT_ESTIMATE = """dtsim estimate: 7e+09 params, 8 ranks, mixed precision (bf16 weights and gradients, fp32 master), adam

  stage          weights    grads  master  adam_m  adam_v     total  B/param  sent/step
  -------------------------------------------------------------------------------------
  0 (DDP)          14 GB    14 GB   28 GB   28 GB   28 GB    112 GB       16    24.5 GB
  1 (opt state)    14 GB    14 GB  3.5 GB  3.5 GB  3.5 GB   38.5 GB      5.5    24.5 GB
  2 (+ grads)      14 GB  1.75 GB  3.5 GB  3.5 GB  3.5 GB  26.25 GB     3.75    24.5 GB
  3 (+ weights)  1.75 GB  1.75 GB  3.5 GB  3.5 GB  3.5 GB     14 GB        2   36.75 GB

stage 0 (DDP): 16 bytes/param x 7e+09 params = 112 GB per device; one gradient is 14 GB (bf16);
a ring all-reduce of it sends 2(N - 1)/N x 14 GB = 24.5 GB per device per step.
"""


def case_train():
    rc, out, _ = run("train", "--strategy", "zero3", "--ranks", "4", "--steps", "6", "--quiet")
    expect(rc == 0, f"train exit code {rc}")
    expect_match(r"^dtsim train: zero3, mlp D 16 H 64 L 2", out, "header")
    expect(len(re.findall(r"^ +\d+  \d+\.\d+$", out, re.M)) == 6, "six loss lines:\n" + out)
    for r in range(4):
        expect_match(rf"^ +{r} +[\d.]+ KiB +[\d.]+ KiB .* KiB +\d+\.\d$", out, f"rank {r} row")
    expect_match(r"^step time ", out, "step time")
    rc, out, _ = run("train", "--strategy", "ep", "--model", "moe", "--experts", "4",
                     "--optimizer", "adam", "--precision", "bf16", "--steps", "3", "--quiet")
    expect(rc == 0 and "moe D 16 F 32 E 4 top-2" in out, "ep moe bf16 run:\n" + out)
    # What ran, not just what was asked for: DDP's small buckets go to rd under auto.
    rc, out, _ = run("train", "--strategy", "ddp", "--steps", "2", "--quiet")
    expect_match(r"^collectives ran: all_reduce rd \(auto\)$", out, "resolved algorithm")
    rc, out, err = run("train", "--ranks=2", "--steps", "3e0", "--batch", "1.6e1", "--quiet")
    expect(rc == 0 and ", 2 ranks, 3 steps, batch 16," in out, f"3e0 is 3: {rc} {err}\n{out}")


def case_train_recompute():
    """--recompute full at least halves a pipeline stage's activation peak (GPipe, four
    micro-batches in flight), with the same losses; top-k above 2 trains and checks."""
    peaks, losses = {}, {}
    for r in ["none", "selective", "full"]:
        rc, out, _ = run("train", "--pp", "2", "--micro-batches", "4", "--schedule", "gpipe",
                         "--layers", "4", "--steps", "4", "--recompute", r, "--quiet")
        expect(rc == 0, f"--recompute {r} exit code {rc}\n{out}")
        m = re.search(r"^activations peak ([\d.]+) KiB \(largest rank; recompute (\w+)\)$", out,
                      re.M)
        expect(m is not None and m.group(2) == r, f"activations peak line:\n{out}")
        peaks[r] = float(m.group(1))
        losses[r] = re.findall(r"^ +\d+  \d+\.\d+$", out, re.M)
    expect(2 * peaks["full"] <= peaks["none"], f"full does not halve the peak: {peaks}")
    expect(peaks["selective"] < peaks["none"], f"selective does not lower the peak: {peaks}")
    expect(losses["full"] == losses["none"] == losses["selective"], f"losses differ: {losses}")
    rc, out, _ = run("train", "--model", "moe", "--top-k", "4", "--experts", "8", "--steps", "5",
                     "--check", "--quiet")
    expect(rc == 0 and "E 8 top-4" in out, f"top-4 of 8 --check exit code {rc}\n{out}")
    expect_match(r"^check: PASS ", out, "top-4 verdict")


def case_check_exit_codes():
    rc, out, _ = run("train", "--strategy", "ddp", "--algo", "deterministic", "--steps", "5",
                     "--check", "--quiet")
    expect(rc == 0, f"ddp --check exit code {rc}")
    expect_match(r"^check: PASS  max \|dparam\| 0,.*\(bitwise vs accum\)$", out, "ddp bitwise")
    for s in ["zero1", "tp", "dp-tp"]:
        rc, out, _ = run("train", "--strategy", s, "--steps", "5", "--check", "--quiet")
        expect(rc == 0, f"{s} --check exit code {rc}\n{out}")
        expect_match(r"^check: PASS .*rtol 1e-05 atol 1e-06 vs single\)$", out, s)
    rc, out, _ = run("train", "--strategy", "ddp", "--pitfall", "forget-divide", "--steps", "5",
                     "--check", "--quiet")
    expect(rc == 1, f"forget-divide --check must exit 1, got {rc}")
    expect_match(r"^check: FAIL ", out, "pitfall verdict")
    # A diverging run says so, and the check names the divergence rather than a float drift.
    rc, out, _ = run("train", "--strategy", "ddp", "--ranks", "2", "--lr", "50", "--steps", "8",
                     "--check", "--quiet")
    expect(rc == 1, f"diverged --check must exit 1, got {rc}\n{out}")
    expect_match(r"^warning: training diverged: the loss is not finite from step \d+ on; a "
                 r"smaller --lr \(now 50\)", out, "divergence warning")
    expect_match(r"^check: FAIL \(the reference diverged too: its loss is not finite from step "
                 r"\d+\)", out, "diverged verdict")


def case_report():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        rc, _, _ = run("train", "--strategy", "zero2", "--ranks", "3", "--batch", "24",
                       "--steps", "5", "--optimizer", "adam", "--check", "--report", path,
                       "--quiet")
        expect(rc == 0, f"exit code {rc}")
        expect(os.listdir(d) == ["r.json"], f"only r.json is left: {os.listdir(d)}")
        r = json.load(open(path))
    expect(r.get("generator") == "dtsim train", "the report names its writer")
    types = {"dtsim_report_version": int, "config": dict, "num_params": int, "steps": int,
             "losses": list, "final_loss": float, "seconds_per_step": float,
             "bytes_sent_per_step": (int, float), "ranks": list, "check": dict}
    for key, t in types.items():
        expect(isinstance(r.get(key), t), f"report.{key} is {type(r.get(key))}")
    c = r["config"]
    for key in ["strategy", "model", "ranks", "steps", "batch", "micro_batches", "optimizer",
                "lr", "precision", "algo", "seed", "pitfall", "shape"]:
        expect(key in c, "config." + key)
    expect(c["strategy"] == "zero2" and c["ranks"] == 3 and c["optimizer"] == "adam", str(c))
    expect(len(r["losses"]) == 5 and all(isinstance(x, float) for x in r["losses"]), "losses")
    expect(len(r["ranks"]) == 3, "three ranks")
    categories = {"weights", "gradients", "master_weights", "adam_m", "adam_v", "activations"}
    for i, rank in enumerate(r["ranks"]):
        expect(rank["rank"] == i, "rank index")
        expect(set(rank["memory_bytes"]) == categories, str(rank["memory_bytes"]))
        expect(all(isinstance(v, int) for v in rank["memory_bytes"].values()), "memory ints")
        expect(set(rank["collectives"]) == {"reduce_scatter", "all_gather"},
               "zero2 collectives: " + str(list(rank["collectives"])))
        for op in rank["collectives"].values():
            expect(set(op) == {"calls", "steps", "messages_sent", "bytes_sent",
                               "messages_received", "bytes_received", "seconds"}, str(op))
            expect(op["seconds"] > 0, "a collective takes time")
            expect(op["calls"] == 5, "one call per step")
        expect(rank["bytes_sent"] == sum(o["bytes_sent"] for o in rank["collectives"].values()),
               "bytes_sent is the sum over collectives")
        peers = [p for c in rank["communicators"] for p in c["peers"]]
        expect(rank["bytes_sent"] == sum(p["bytes_sent"] for p in peers),
               "bytes_sent is the sum over communicators and peers")
    # zero2 runs on the world communicator only: one 3 x 3 matrix, rows as sent per rank.
    expect([g["group"] for g in r["traffic"]] == ["world"], str(r["traffic"]))
    world = r["traffic"][0]
    expect(world["communicators"] == [{"name": "world", "ranks": [0, 1, 2]}], str(world))
    for i, rank in enumerate(r["ranks"]):
        expect(sum(world["bytes"][i]) == rank["bytes_sent"], f"traffic row {i} = bytes_sent")
        expect(sum(world["messages"][i]) == rank["messages_sent"], f"traffic row {i} messages")
        expect(world["bytes"][i][i] == 0, "nothing sent to itself")
    ch = r["check"]
    expect(ch["passed"] is True and ch["reference"] == "single", str(ch))
    expect(len(ch["reference_losses"]) == 5, "reference losses per step")
    for key in ["criterion", "bitwise_equal", "max_abs_diff", "max_rel_diff", "max_loss_diff"]:
        expect(key in ch, "check." + key)


def case_trace():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        rc, out, _ = run("train", "--strategy", "dp-tp", "--ranks", "4", "--steps", "3",
                         "--trace", path, "--quiet")
        expect(rc == 0, f"exit code {rc}")
        t = json.load(open(path))
    expect(t.get("generator") == "dtsim train", "the trace names its writer")
    events = t["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    expect(names == {r: f"rank {r}" for r in range(4)}, f"one track per rank: {names}")
    spans = [e for e in events if e["ph"] == "X"]
    expect({e["tid"] for e in spans} == set(range(4)), "events on every rank")
    for e in spans:
        expect(e["pid"] == 0 and isinstance(e["ts"], (int, float)) and e["dur"] >= 0, str(e))
    for r in range(4):
        mine = {e["name"] for e in spans if e["tid"] == r}
        expect({"forward", "backward", "optimizer", "all_reduce"} <= mine, f"rank {r}: {mine}")
    coll = [e for e in spans if e["cat"] == "collective"]
    expect(coll and all(isinstance(e["args"]["bytes"], int) for e in coll), "collective bytes")



def case_bad_inputs():
    failures = []
    for entry in BAD:
        args, message = entry[0], entry[1]
        extra = entry[2] if len(entry) > 2 else {}
        args = extra.get("args", args)
        with tempfile.TemporaryDirectory() as d:
            for name, text in extra.get("files", {}).items():
                if text.startswith("->"):
                    os.symlink(text[2:], os.path.join(d, name))
                else:
                    open(os.path.join(d, name), "w").write(text)
            before = sorted(os.listdir(d))
            rc, out, err = run(*args, cwd=d, env=extra.get("env"))
            after = sorted(os.listdir(d))
        lines = err.splitlines()
        if rc != 2 or len(lines) != 1 or message not in err or out or after != before:
            failures.append(f"dtsim {' '.join(args)}: exit {rc}, stderr {err!r}, "
                            f"stdout {out[:80]!r}, files {after}; want exit 2, one line with "
                            f"{message!r}, no file")
    expect(not failures, "\n".join(failures))
    print(f"{len(BAD)} bad inputs: exit code 2 and a one-line error naming the flag")


def case_config():
    with tempfile.TemporaryDirectory() as d:
        # Bare keys are the flags of the command being run.
        open(os.path.join(d, "run.toml"), "w").write(
            '# dtsim train --config run.toml\nstrategy = "dp-tp"\nranks = 8\ntp = 2\n'
            'batch = 64\nsteps = 3\nquiet = true\n')
        rc, out, err = run("train", "--config", "run.toml", cwd=d)
        expect(rc == 0, f"exit {rc}: {err}")
        expect_match(r"^dtsim train: dp-tp, .*, 8 ranks \(dp 4 x tp 2\), 3 steps, batch 64", out,
                     "the file's flags")
        rc, out, err = run("train", "--config", "run.toml", "--ranks", "4", "--batch", "32", cwd=d)
        expect(rc == 0, f"exit {rc}: {err}")
        expect_match(r", 4 ranks \(dp 2 x tp 2\), 3 steps, batch 32", out, "command line wins")
        # Sections hold several commands' flags in one file; each command reads its own.
        open(os.path.join(d, "both.toml"), "w").write(
            '[train]\nstrategy = "zero2"\nsteps = 2\n\n[walk]\nop = "broadcast"\nranks = 2\n')
        rc, out, err = run("walk", "--config", "both.toml", "--numel", "2", cwd=d)
        expect(rc == 0 and out.startswith("broadcast,"), f"[walk] section: {rc} {out[:80]!r}")
        rc, out, err = run("train", "--config", "both.toml", "--quiet", cwd=d)
        expect(rc == 0 and out.startswith("dtsim train: zero2,") and ", 2 steps," in out,
               f"[train] section: {rc} {out[:80]!r}")
    rc, out, err = run("train", "--steps", "2", "--quiet", env={"WORLD_SIZE": "2"})
    expect(rc == 0, f"WORLD_SIZE exit {rc}: {err}")
    expect_match(r", 2 ranks, 2 steps", out, "--ranks from $WORLD_SIZE")
    rc, out, err = run("train", "--steps", "2", "--quiet", "--ranks", "8",
                       env={"WORLD_SIZE": "2"})
    expect(rc == 0 and ", 8 ranks," in out, "--ranks beats $WORLD_SIZE")


def case_stress_report():
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("stress", "--ranks", "3", "--iterations", "2", "--report", "s.json",
                           cwd=d)
        expect(rc == 0, f"exit {rc}: {err}")
        r = json.load(open(os.path.join(d, "s.json")))
        expect(r["failures"] == 0 and r["iterations"] == 2 and r["options"]["ranks"] == 3, str(r))
        expect(os.listdir(d) == ["s.json"], f"left {os.listdir(d)}")
        expect(r["generator"] == "dtsim stress", "the report names its writer")
        rc, _, err = run("stress", "--ranks", "2", "--iterations", "1", "--report", "s.json", cwd=d)
        expect(rc == 0, f"stress --report over its own report: exit {rc}: {err}")
        rc, out, err = run("stress", "--ranks", "2", "--iterations", "3", "--seed", "3",
                           "--unsafe-live-sends", "--keep-going", "--timeout-ms", "2000",
                           "--report", "-", cwd=d)
        r = json.loads(out)
        expect(rc == 1 and r["failures"] > 0 and r["flight_report"] and r["reproduce"],
               f"a caught failure: exit {rc}, report {str(r)[:200]}")


def case_train_header():
    rc, out, err = run("train", "--strategy", "single", "--steps", "2")
    expect(rc == 0 and ", 1 rank, 2 steps" in out, f"single runs one rank:\n{out}")
    rc, out, err = run("train", "--strategy", "accum", "--steps", "2")
    expect(rc == 0 and ", 1 rank accumulating as 4 would, " in out, f"accum:\n{out}")
    rc, out, err = run("train", "--strategy", "dp-tp", "--ranks", "8", "--batch", "64",
                       "--steps", "2", "--quiet")
    expect(rc == 0 and ", 8 ranks (dp 4 x tp 2), " in out, f"dp-tp layout:\n{out}")
    cores = os.cpu_count()
    rc, out, err = run("train", "--ranks", "256", "--batch", "256", "--steps", "1")
    expect(rc == 0, f"256 ranks: exit {rc} {err}")
    if cores < 256:
        expect_match(rf"^note: 256 rank threads on {cores} cores take turns", err, "oversubscribed")
        expect(len(err.splitlines()) == 1, f"one line: {err!r}")


def case_demo():
    rc, out, err = run("demo", "--quiet")
    expect(rc == 0, f"demo exit code {rc}\n{out}\n{err}")
    expect(err == "", "--quiet: nothing on stderr")
    checks = out.split("what each run held")[0]  # the first of the two tables
    rows = re.findall(r"^(\S+(?: \S+)*) +(mlp|moe|gpt) ", checks, re.M)
    want = [(s, "mlp") for s in ["single", "accum", "ddp", "zero1", "zero2", "zero3", "tp",
                                 "dp-tp", "dp 2 x tp 2 zero1", "dp 2 x pp 2 1f1b",
                                 "dp 2 x tp 2 x pp 2 1f1b zero1", "ddp forget-divide sgd"]]
    want += [(s, "moe") for s in ["single", "accum", "ddp", "zero1", "zero2", "zero3", "ep",
                                  "dp 4 ep 2"]]
    want += [(s, "gpt") for s in ["single", "tp", "tp sp", "cp 4", "dp 2 x tp 2 sp x cp 2"]]
    expect(rows == want, f"rows {rows}")
    expect(len(re.findall(r" PASS(?: \(drift\))?$", out, re.M)) == 20,
           "twenty PASS verdicts:\n" + out)
    expect_match(r"^dp 2 x tp 2 sp x cp 2 +gpt .* tol vs single +PASS(?: \(drift\))?$", out,
                 "the gpt's dp x tp sp x cp row (8 rank threads)")
    # The gpt learned its task: the mixed mesh's parameters reverse held-out sequences.
    acc = re.search(r"^gpt, the dp 2 x tp 2 sp x cp 2 row's trained parameters:\n"
                    r"  held-out accuracy ([\d.]+) -> ([\d.]+) .*chance ([\d.]+)\)$", out, re.M)
    expect(acc and float(acc[2]) > 3 * float(acc[3]) > float(acc[1]) / 2,
           f"gpt held-out accuracy {acc and acc.groups()}")
    expect_match(r"^dp 2 x tp 2 x pp 2 1f1b zero1 +mlp .* tol vs single +PASS$",
                 out, "the 3D row (8 rank threads)")
    expect_match(r"^dp 2 x pp 2 1f1b +mlp .* 0  bitwise vs accum +PASS$", out, "pipeline bitwise row")
    expect_match(r"^ddp forget-divide sgd +mlp .* FAIL \(expected\)$", out, "pitfall row")
    expect_match(r"^ddp +mlp .* 0  bitwise vs accum +PASS$", out, "ddp bitwise row")
    expect_match(r"holds\n16 B/param, 112 GB per GPU .* 14 GB of\nbf16 gradients sends 24\.5 GB",
                 out, "the lesson's lines")
    expect_match(r"= 16 bytes of model state per parameter$", out, "measured 16 B/param")
    expect_match(r"^every check passed; the forgotten division failed as expected", out, "end")


def case_issue37_minor():
    """Issue 37, defect 9: the seed range the help states, a FIFO without a reader, the
    message prefixes."""
    rc, out, err = run("stress", "--seed", "9223372036854775000", "--ranks", "2", "--iterations", "1")
    expect(rc == 0 and "seed 9223372036854775000" in out,
           f"--seed 2^63-808 (help allows 2^63-1): exit {rc}, {err!r}")
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        import time
        t0 = time.monotonic()
        rc, out, err = run("train", "--steps", "2", "--quiet", "--report", fifo)
        secs = time.monotonic() - t0
        expect(rc == 1 and "no process opened it for reading within 10 s" in err and secs < 60,
               f"a FIFO without a reader: exit {rc} after {secs:.0f} s, {err!r}")
    p = subprocess.run(f"'{DTSIM}' help > /dev/full", shell=True, capture_output=True, text=True,
                       timeout=60)
    expect(p.returncode == 1 and p.stderr.startswith("dtsim: cannot write standard output"),
           f"dtsim help > /dev/full: exit {p.returncode}, {p.stderr!r}")
    # A later output that fails (a full disk) leaves no earlier one behind.
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("train", "--steps", "2", "--quiet", "--report", "r.json",
                           "--trace", "/dev/full", cwd=d)
        expect(rc == 1 and "cannot write /dev/full" in err and os.listdir(d) == [],
               f"--report r.json --trace /dev/full: exit {rc}, files {os.listdir(d)}, {err!r}")
    print("seed 2^63-808 accepted; FIFO without reader: exit 1 after the deadline; prefixes; "
          "all outputs or none")


if __name__ == "__main__":
    globals()["case_" + sys.argv[2]]()
