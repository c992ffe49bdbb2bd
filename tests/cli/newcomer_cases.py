"""cli_test.py's cases for what a new user tripped over (issue 36): terminal output that fits
100 columns unless --wide, did-you-mean for a mistyped command, and walk's and help's texts
that contradicted what runs."""
import os
import re
import shutil
import subprocess
import tempfile

from cli_util import DTSIM, expect, expect_match, run

COLUMNS = 100


def widest(text):
    return max((len(line) for line in text.split("\n")), default=0)


def case_terminal_width():
    # walk --pp 8 --micro-batches 16 was 191 (1f1b), 227 (zb-h1) and 475 (interleaved) wide.
    for schedule in [["1f1b"], ["zb-h1"], ["interleaved", "--virtual-stages", "2"], ["gpipe"]]:
        args = ["walk", "--pp", "8", "--micro-batches", "16", "--schedule", *schedule]
        rc, out, err = run(*args)
        expect(rc == 0, f"{' '.join(args)}: exit {rc} {err}")
        expect(widest(out) <= COLUMNS, f"{' '.join(args)}: {widest(out)} columns:\n{out}")
        # The bands hold every slot once: the slot numbers run 0..last without a gap.
        slots = [int(x) for line in out.split("\n") if line.startswith("slot ")
                 for x in line.split()[1:]]
        expect(slots == list(range(len(slots))) and len(slots) > 30, f"slot numbers {slots}")
        for r in range(8):
            cells = [c for line in out.split("\n") if line.startswith(f"stage {r} ")
                     for c in line.split()[2:]]
            expect(len(cells) == len(slots), f"stage {r}: {len(cells)} cells, {len(slots)} slots")
        rc, wide, _ = run(*args, "--wide")
        expect(rc == 0 and widest(wide) > COLUMNS and wide.count("\nslot ") + wide.startswith("slot ") == 1,
               f"{' '.join(args)} --wide: one band, {widest(wide)} columns")
    # walk's step lines list every send: at 8 ranks they were 136 columns; now they wrap
    # under the first send, and every send is still there.
    rc, out, _ = run("walk", "--op", "all_reduce", "--ranks", "8", "--numel", "8")
    steps = re.findall(r"^(step \d+ \([a-z-]+\):.*(?:\n {20,}\S.*)*)", out, re.M)
    expect(rc == 0 and len(steps) == 14, f"walk 8 ranks: {len(steps)} steps:\n{out}")
    for st in steps:
        expect(widest(st) <= COLUMNS, f"step line {widest(st)} columns: {st}")
        expect(len(re.findall(r"\d->\d chunk \d", st)) == 8, f"a step lost sends: {st}")
    rc, _, err = run("walk", "--op", "all_reduce", "--wide")
    expect(rc == 2 and "--wide needs --pp" in err, f"walk --op --wide: {rc} {err}")
    # The demo's table was 161 columns; --wide keeps that one table.
    rc, out, err = run("demo", "--steps", "3", "--quiet")
    expect(rc == 0, f"demo exit {rc}: {err}")
    expect(widest(out) <= COLUMNS, f"demo: {widest(out)} columns:\n{out}")
    expect_match(r"^ddp forget-divide sgd +mlp .* bitwise vs accum +FAIL \(expected\)$", out,
                 "pitfall row")
    expect_match(r"^zero1 +mlp .* tol vs single +PASS$", out, "zero1 row")
    expect_match(r"^check: bitwise = equal to the bit; tol = within rtol 1e-05 atol 1e-06 \(fp32\)$",
                 out, "what tol stands for")
    expect_match(r"^zero2 +mlp +16\.9/4\.22/0/4\.22/4\.22 +25\.3 KiB ", out, "zero2 cost row")
    rc, out, _ = run("demo", "--steps", "3", "--quiet", "--wide")
    expect(rc == 0 and widest(out) > 150, f"demo --wide: {widest(out)} columns")
    expect_match(r"^zero2 +mlp .* rtol 1e-05 atol 1e-06 vs single +PASS +16\.9/4\.22/0/4\.22/4\.22 ",
                 out, "demo --wide: one row with every column")


def case_newcomer_texts():
    # A mistyped command gets the nearest one.
    rc, out, err = run("trian", "--ranks", "4")
    expect(rc == 2 and out == "", f"trian: {rc}")
    expect(err.strip() == "dtsim: unknown command 'trian'; did you mean train? run dtsim --help "
           "for the list", f"trian: {err!r}")
    rc, _, err = run("frobnicate")
    expect(rc == 2 and "did you mean" not in err, f"frobnicate: nothing near: {err!r}")
    # walk's help said `direct` takes "one step"; walk draws it as N - 1 steps.
    rc, out, _ = run("walk", "--help")
    expect(rc == 0 and "one step" not in out, "walk --help still says 'one step'")
    expect_match(r"direct: chunk j straight to rank j, summed there in rank order: one round "
                 r"\(N - 1 sends per rank: N - 1 steps in walk\)", out, "walk --help direct")
    rc, out, _ = run("walk", "--op", "reduce_scatter", "--algo", "direct", "--ranks", "4")
    expect(rc == 0 and len(re.findall(r"^step \d", out, re.M)) == 3, f"direct at 4 ranks:\n{out}")
    # broadcast moves whole buffers: no "(chunks of 1 1 0 0 0 0 0 0)".
    rc, out, _ = run("walk", "--op", "broadcast", "--ranks", "8", "--numel", "2")
    expect(rc == 0 and "chunks of" not in out, f"broadcast header:\n{out}")
    expect_match(r"^broadcast, algo tree \(auto\), 8 ranks, 2 elements per rank \(whole buffers, "
                 r"root 0\)$", out, "broadcast header")
    # --algo shared runs as deterministic at walk's sizes, and says so.
    rc, out, _ = run("walk", "--op", "all_reduce", "--algo", "shared")
    expect(rc == 0, f"walk --algo shared: {rc}")
    expect_match(r"^all_reduce, algo deterministic, 4 ranks", out, "shared's header")
    expect_match(r"^note: --algo shared runs as deterministic here: it needs buffers of 64 KiB or "
                 r"more \(the lend$", out, "shared's note")
    rc, out, _ = run("walk", "--op", "all_reduce", "--algo", "ring")
    expect(rc == 0 and "note:" not in out, "ring runs as ring: no note")
    # zb-h1 with m < p: the formula is not reached, and the output says why.
    rc, out, _ = run("walk", "--pp", "4", "--micro-batches", "2", "--schedule", "zb-h1")
    expect(rc == 0, f"zb-h1 m < p: {rc}")
    expect_match(r"^bubble: 5/11 .* = 1/3$", out, "zb-h1 m 2 bubble")
    expect_match(r"^  \(the formula holds for m >= p: with 2 micro-batches for 4 stages the "
                 r"warm-up and$", out, "zb-h1 m < p says why")
    # train's help gave --tp a default of 2; the mesh's is 1 (2 only for dp-tp).
    rc, out, _ = run("train", "--help")
    expect(rc == 0 and not re.search(r"--tp INT[^\n]*=2", out), "train --help: --tp ...=2")
    expect_match(r"\[default: 1 on the mesh, 2 for --strategy dp-tp\]", out, "--tp default")


def case_headers():
    # train --algo tree --strategy zero1 said "algo tree" and ran ring: the header names the
    # collectives that have no tree, and the `collectives ran:` line agrees.
    rc, out, err = run("train", "--strategy", "zero1", "--algo", "tree", "--steps", "2", "--quiet")
    expect(rc == 0, f"zero1 --algo tree: {rc} {err}")
    expect_match(r", algo tree \(reduce_scatter, all_gather have no tree: auto\)$", out,
                 "zero1 --algo tree header")
    expect_match(r"^collectives ran: reduce_scatter (ring|direct|rd)[^,]* \(auto\), all_gather ", out,
                 "zero1 ran auto's choices")
    rc, out, _ = run("train", "--strategy", "ddp", "--algo", "tree", "--steps", "2", "--quiet")
    expect_match(r", algo tree$", out, "ddp --algo tree: all_reduce has tree")
    expect_match(r"^collectives ran: all_reduce tree$", out, "ddp ran tree")
    rc, out, _ = run("train", "--strategy", "ep", "--model", "moe", "--algo", "ring", "--steps", "2",
                     "--quiet")
    expect_match(r", algo ring \(all_to_all has no ring: auto\)$", out, "ep --algo ring header")
    # Under mpirun the header says the ranks are processes.
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("mpirun not installed: the process header is not checked")
        return
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    p = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", DTSIM,
                        "train", "--steps", "2", "--quiet", "--threads-per-process", "2"],
                       capture_output=True, text=True, timeout=110, env=env)
    expect(p.returncode == 0, f"mpirun train: {p.returncode} {p.stderr}")
    expect_match(r"^dtsim train: ddp, .*, 4 ranks as 2 MPI processes x 2 rank threads, ", p.stdout,
                 "mpirun train header")


def case_dry_run():
    # DTSIM_DRY_RUN=1 (what tests/docs checks the commands named in the docs' prose with):
    # every check the command makes, then exit 0 where the work would start, nothing written.
    dry = {"DTSIM_DRY_RUN": "1"}
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("train", "--pp", "4", "--layers", "4", "--micro-batches", "8", "--html",
                           "pp.html", "--report", "r.json", cwd=d, env=dry)
        expect(rc == 0 and out == "dtsim train: dry run: the command line is valid\n",
               f"dry run: exit {rc}\n{out}{err}")
        expect(os.listdir(d) == [], f"a dry run left {os.listdir(d)}")
    for args, why in [(["train", "--tp", "3"], "--hidden 64 is not divisible by --tp 3"),
                      (["train", "--report"], "--report needs a value"),
                      (["demo", "--steps", "0"], "--steps"),
                      (["walk", "--pp", "4", "--micro-batches", "0"], "--micro-batches")]:
        rc, out, err = run(*args, env=dry)
        expect(rc == 2 and why in err and "dry run" not in out,
               f"{' '.join(args)} under a dry run: exit {rc}, want 2 and '{why}'\n{out}{err}")
    # Without the variable the same command runs.
    rc, out, _ = run("walk", "--op", "all_reduce", "--ranks", "2", "--numel", "2")
    expect(rc == 0 and "dry run" not in out, f"walk without a dry run: exit {rc}\n{out}")
