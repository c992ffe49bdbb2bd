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

DTSIM = os.path.abspath(sys.argv[1])


def run(*args, cwd=None):
    p = subprocess.run([DTSIM, *args], capture_output=True, text=True, cwd=cwd, timeout=110)
    return p.returncode, p.stdout, p.stderr


def expect(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


def expect_match(pattern, text, what):
    expect(re.search(pattern, text, re.M), f"{what}: /{pattern}/ not in output:\n{text}")


def case_help():
    for cmd in ["demo", "train", "walk", "estimate", "stress"]:
        rc, out, err = run(cmd, "--help")
        expect(rc == 0, f"{cmd} --help exit code {rc}")
        expect_match(rf"^example: dtsim {cmd}\b", out, f"{cmd} --help")
    rc, out, _ = run("--help")
    expect(rc == 0, "dtsim --help")
    for cmd in ["demo", "train", "walk", "estimate"]:
        expect_match(rf"^  {cmd} ", out, "dtsim --help lists " + cmd)


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


def case_report():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        rc, _, _ = run("train", "--strategy", "zero2", "--ranks", "3", "--batch", "24",
                       "--steps", "5", "--optimizer", "adam", "--check", "--report", path,
                       "--quiet")
        expect(rc == 0, f"exit code {rc}")
        expect(os.listdir(d) == ["r.json"], f"only r.json is left: {os.listdir(d)}")
        r = json.load(open(path))
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
                               "messages_received", "bytes_received"}, str(op))
            expect(op["calls"] == 5, "one call per step")
        expect(rank["bytes_sent"] == sum(o["bytes_sent"] for o in rank["collectives"].values()),
               "bytes_sent is the sum over collectives")
    ch = r["check"]
    expect(ch["passed"] is True and ch["reference"] == "single", str(ch))
    for key in ["criterion", "bitwise_equal", "max_abs_diff", "max_rel_diff", "max_loss_diff"]:
        expect(key in ch, "check." + key)


def case_trace():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        rc, out, _ = run("train", "--strategy", "dp-tp", "--ranks", "4", "--steps", "3",
                         "--trace", path, "--quiet")
        expect(rc == 0, f"exit code {rc}")
        t = json.load(open(path))
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


BAD = [  # (arguments, what the one-line error must contain)
    (["train", "--bogus", "1"], "unknown flag --bogus"),
    (["train", "--strategy", "fsdp"], "--strategy must be one of single, accum, ddp"),
    (["train", "--model", "cnn"], "--model must be one of mlp, moe"),
    (["train", "--ranks", "0"], "--ranks must be between 1"),
    (["train", "--ranks", "two"], "--ranks must be a whole number"),
    (["train", "--steps", "0"], "--steps must be between 1"),
    (["train", "--lr", "-1"], "--lr must be between"),
    (["train", "--optimizer", "rmsprop"], "--optimizer must be one of sgd, adam"),
    (["train", "--precision", "fp16"], "--precision must be one of fp32, bf16"),
    (["train", "--algo", "butterfly"], "--algo must be one of"),
    (["train", "--batch", "30"], "--batch 30 is not divisible by --ranks 4"),
    (["train", "--batch", "32", "--micro-batches", "3"], "--batch 32 is not divisible by --ranks 4 x --micro-batches 3"),
    (["train", "--strategy", "tp", "--hidden", "30"], "--hidden 30 is not divisible by the tensor-parallel width 4"),
    (["train", "--strategy", "dp-tp", "--tp", "3"], "--ranks 4 is not divisible by --tp 3"),
    (["train", "--strategy", "tp", "--model", "moe"], "--strategy tp needs --model mlp"),
    (["train", "--strategy", "ep"], "--strategy ep needs --model moe"),
    (["train", "--strategy", "ep", "--model", "moe", "--ranks", "8", "--batch", "64"], "--ranks 8 exceeds --experts 4"),
    (["train", "--model", "moe", "--top-k", "3"], "--top-k must be between 1 and 2"),
    (["train", "--experts", "8"], "--experts applies to --model moe"),
    (["train", "--model", "moe", "--layers", "3"], "--layers applies to --model mlp"),
    (["train", "--tp", "2"], "--tp applies to --strategy dp-tp"),
    (["train", "--pitfall", "forget-sync"], "--pitfall must be one of forget-divide"),
    (["train", "--strategy", "tp", "--pitfall", "forget-divide"], "--pitfall forget-divide applies to --strategy ddp"),
    (["train", "--report", "/nonexistent-dir/r.json"], "--report /nonexistent-dir/r.json cannot be written"),
    (["train", "--trace", "/nonexistent-dir/t.json"], "--trace /nonexistent-dir/t.json cannot be written"),
    (["train", "--steps"], "--steps needs a value"),
    (["train", "--check=yes"], "--check takes no value"),
    (["train", "ddp"], "unexpected argument 'ddp'"),
    (["estimate"], "--params is required"),
    (["estimate", "--params", "7e9", "--stage", "4"], "--stage must be between 0 and 3"),
    (["estimate", "--params", "-1"], "--params must be between"),
    (["estimate", "--params", "7e9", "--precision", "fp8"], "--precision must be one of bf16, fp32"),
    (["demo", "--steps", "0"], "--steps must be between 1"),
    (["demo", "--ranks", "8"], "unknown flag --ranks"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["walk", "--op", "reduce_scatter", "--algo", "rd"],
     "reduce_scatter has no 'rd' algorithm; use auto, ring, direct or deterministic"),
    (["walk", "--op", "all_to_all", "--algo", "rd"], "all_to_all has no 'rd' algorithm; use auto or direct"),
    (["walk", "--op", "broadcast", "--algo", "butterfly"], "--algo for broadcast must be one of auto, tree or direct"),
]


def case_bad_inputs():
    failures = []
    for args, message in BAD:
        rc, out, err = run(*args)
        lines = err.splitlines()
        if rc != 2 or len(lines) != 1 or message not in err or out:
            failures.append(f"dtsim {' '.join(args)}: exit {rc}, stderr {err!r}, "
                            f"stdout {out[:80]!r}; want exit 2 and one line with {message!r}")
    expect(not failures, "\n".join(failures))
    print(f"{len(BAD)} bad inputs: exit code 2 and a one-line error naming the flag")


def case_no_partial_files():
    with tempfile.TemporaryDirectory() as d:
        for args in [["--batch", "30"], ["--strategy", "ep"], ["--ranks", "0"]]:
            rc, _, _ = run("train", *args, "--report", "r.json", "--trace", "t.json", cwd=d)
            expect(rc == 2, f"{args}: exit {rc}")
            expect(os.listdir(d) == [], f"{args} left {os.listdir(d)}")
        # The trace path fails after the report's FILE.tmp was opened: that one is removed.
        rc, _, _ = run("train", "--report", "r.json", "--trace", "/nonexistent-dir/t", cwd=d)
        expect(rc == 2 and os.listdir(d) == [], f"exit {rc}, left {os.listdir(d)}")


def case_demo():
    rc, out, err = run("demo", "--quiet")
    expect(rc == 0, f"demo exit code {rc}\n{out}\n{err}")
    expect(err == "", "--quiet: nothing on stderr")
    rows = re.findall(r"^(\S+(?: forget-divide sgd)?) +(mlp|moe) ", out, re.M)
    want = [(s, "mlp") for s in ["single", "accum", "ddp", "zero1", "zero2", "zero3", "tp",
                                 "dp-tp", "ddp forget-divide sgd"]]
    want += [(s, "moe") for s in ["single", "accum", "ddp", "zero1", "zero2", "zero3", "ep"]]
    expect(rows == want, f"rows {rows}")
    expect(len(re.findall(r" PASS ", out)) == 12, "twelve PASS verdicts:\n" + out)
    expect_match(r"^ddp forget-divide sgd +mlp .* FAIL \(expected FAIL\) ", out, "pitfall row")
    expect_match(r"^ddp +mlp .* 0  bitwise vs accum +PASS ", out, "ddp bitwise row")
    expect_match(r"16 B/param,\n112 GB per GPU .* 14 GB of bf16 gradients sends 24\.5 GB", out,
                 "the lesson's line")
    expect_match(r"= 16 bytes of model state per parameter$", out, "measured 16 B/param")
    expect_match(r"^every check passed; the forgotten division failed as expected", out, "end")


if __name__ == "__main__":
    globals()["case_" + sys.argv[2]]()
