"""cli_test.py's pipeline and device-mesh cases: dtsim walk --pp, train --pp and the mesh
combinations the README lists."""
import json
import os
import re
import tempfile

from cli_util import expect, expect_match, run



def case_walk_pipeline():
    # The two diagrams: p 4, m 8, bubble 3/11; 1F1B holds at most 4 on stage 0.
    rc, out, err = run("walk", "--pp", "4", "--micro-batches", "8", "--schedule", "gpipe")
    expect(rc == 0 and err == "", f"gpipe exit code {rc}: {err}")
    expect_match(r"^stage 0 F0 F1 F2 F3 F4 F5 F6 F7  \.  \.  \.  \.  \.  \. B0 B1 B2 B3 B4 B5 B6 B7$",
                 out, "gpipe stage 0 row")
    expect_match(r"^stage 3  \.  \.  \. F0 F1 F2 F3 F4 F5 F6 F7 B0 ", out, "gpipe stage 3 row")
    expect_match(r"^bubble: 3/11 of the slots idle \(27\.3%.*formula \(p - 1\)/\(m \+ p - 1\) = 3/11$",
                 out, "gpipe bubble")
    expect_match(r"^  stage 0: 8 \(bound 8\)$", out, "gpipe holds all 8")
    rc, out, _ = run("walk", "--pp", "4", "--micro-batches", "8", "--schedule", "1f1b")
    expect(rc == 0, f"1f1b exit code {rc}")
    expect_match(r"^stage 0 F0 F1 F2 F3  \.  \.  \. B0 F4 B1 F5 B2 F6 B3 F7 B4  \. B5  \. B6  \. B7$",
                 out, "1f1b stage 0 row")
    expect_match(r"^bubble: 3/11 ", out, "1f1b bubble")
    for r, peak in enumerate([4, 3, 2, 1]):
        expect_match(rf"^  stage {r}: {peak} \(bound {peak}\)$", out, f"1f1b peak stage {r}")
    rc, out, _ = run("walk", "--pp", "4", "--micro-batches", "8", "--schedule", "interleaved",
                     "--virtual-stages", "2")
    expect(rc == 0, f"interleaved exit code {rc}")
    expect_match(r"^stage 0 F0\.0 F1\.0 F2\.0 F3\.0 F0\.1 ", out, "interleaved cells")
    expect_match(r"^bubble: 3/19 .*formula \(p - 1\)/\(v m \+ p - 1\) = 3/19$", out,
                 "interleaved bubble")
    expect_match(r"^F3\.1: forward of micro-batch 3 through the stage's chunk 1", out, "legend")
    rc, out, _ = run("walk", "--pp", "4", "--micro-batches", "8", "--schedule", "zb-h1")
    expect(rc == 0 and re.search(r"^bubble: 1/9 ", out, re.M), f"zb-h1 {rc}:\n{out}")
    expect_match(r"^  stage 0: 4 \(bound 4\); 7 kept until their W$", out, "zb-h1 W keeps")
    # Defaults: 1f1b, 8 micro-batches; one stage has no bubble.
    rc, out, _ = run("walk", "--pp", "1")
    expect(rc == 0 and "bubble: 0/1 " in out, f"--pp 1: {rc}\n{out}")


def case_train_pipeline():
    # The "done means": pipelines bitwise equal to accumulation, and a 3D mesh.
    # Each prints its bubble in slots beside the formula, and measured in wall time.
    for sched, bubble in [(["--schedule", "1f1b", "--layers", "4"], "3/11"),
                          (["--schedule", "gpipe", "--layers", "4"], "3/11"),
                          (["--schedule", "interleaved", "--virtual-stages", "2", "--layers", "8"],
                           "3/19"),
                          (["--schedule", "zb-h1", "--layers", "4"], "1/9")]:
        rc, out, err = run("train", "--pp", "4", "--micro-batches", "8", *sched, "--algo",
                           "deterministic", "--check", "--steps", "5", "--quiet")
        expect(rc == 0, f"{sched}: exit code {rc}\n{err}")
        expect_match(r"\(dp 1 x tp 1 x pp 4\)", out, f"{sched} header")
        expect_match(r"^check: PASS  max \|dparam\| 0, max \|dloss\| 0 \(bitwise vs accum\)$", out,
                     f"{sched} bitwise")
        m = re.search(r"^pipeline bubble: (\S+) of the slots idle \([0-9.]+%; formula (\S+)\), "
                      r"wall time ([0-9.]+)% \(median over steps after the first\)$", out, re.M)
        expect(m and m.group(1) == bubble and m.group(2) == bubble, f"{sched} bubble line:\n{out}")
        expect(0 <= float(m.group(3)) < 100, f"{sched} wall-time bubble {m.group(3)}%")
    # --report holds the same numbers.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        rc, _, _ = run("train", "--pp", "2", "--micro-batches", "4", "--schedule", "zb-h1",
                       "--steps", "3", "--report", path, "--quiet")
        expect(rc == 0, f"report exit code {rc}")
        pipe = json.load(open(path)).get("pipeline")
    expect(isinstance(pipe, dict), f"report.pipeline is {pipe!r}")
    expect(pipe["schedule"] == "zb-h1" and pipe["stages"] == 2 and pipe["micro_batches"] == 4
           and pipe["virtual_stages"] == 1, str(pipe))
    expect(pipe["bubble_slots"] == pipe["bubble_formula"] == "1/13", str(pipe))
    expect(isinstance(pipe["bubble_wall"], float) and 0 <= pipe["bubble_wall"] < 1, str(pipe))
    rc, out, err = run("train", "--dp", "2", "--tp", "2", "--pp", "2", "--zero", "1", "--layers",
                       "4", "--micro-batches", "4", "--check", "--steps", "5", "--quiet")
    expect(rc == 0, f"3D exit code {rc}\n{err}")
    expect_match(r"^check: PASS .*rtol 1e-05 atol 1e-06 vs single\)$", out, "3D check")
    # --trace: every stage's track shows forward and backward per micro-batch.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        rc, _, _ = run("train", "--pp", "2", "--micro-batches", "4", "--steps", "2", "--trace",
                       path, "--quiet")
        expect(rc == 0, f"trace exit code {rc}")
        spans = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X"]
    for r in range(2):
        names = [e["name"] for e in spans if e["tid"] == r and e["name"][0] in "FB"]
        expect(sorted(set(names)) == ["B0", "B1", "B2", "B3", "F0", "F1", "F2", "F3"],
               f"rank {r}: {names}")
        expect(len(names) == 2 * 2 * 4, f"rank {r}: one F and one B per micro-batch per step")
    # zb-h1: each stage's track shows F, B (input gradient) and W (weight gradient) spans.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        rc, _, _ = run("train", "--pp", "2", "--micro-batches", "4", "--schedule", "zb-h1",
                       "--steps", "2", "--trace", path, "--quiet")
        expect(rc == 0, f"zb-h1 trace exit code {rc}")
        spans = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X"]
    for r in range(2):
        names = [e["name"] for e in spans if e["tid"] == r and re.fullmatch(r"[FBW]\d+", e["name"])]
        expect(sorted(set(names)) == [f"{k}{i}" for k in "BFW" for i in range(4)],
               f"zb-h1 rank {r}: {names}")
        expect(len(names) == 2 * 3 * 4, f"zb-h1 rank {r}: one F, B and W per micro-batch per step")


def case_train_mesh_combinations():
    # The README's combinations beyond the presets: an MoE in pipeline stages (bitwise to
    # accumulation without --ep), ZeRO with --ep and inside pipelines, ZeRO-3 with --tp.
    for args, verdict in [
            (["--model", "moe", "--layers", "4", "--pp", "4", "--micro-batches", "8", "--algo",
              "deterministic"], r"max \|dparam\| 0, max \|dloss\| 0 \(bitwise vs accum\)"),
            (["--model", "moe", "--layers", "2", "--dp", "2", "--ep", "2", "--pp", "2", "--zero", "1",
              "--micro-batches", "4"], r"rtol 1e-05 atol 1e-06 vs accum\)"),
            (["--dp", "2", "--pp", "2", "--zero", "2", "--micro-batches", "4", "--algo",
              "deterministic"], r"max \|dparam\| 0, max \|dloss\| 0 \(bitwise vs accum\)"),
            (["--model", "moe", "--dp", "4", "--ep", "2", "--zero", "2"], r"vs accum\)"),
            (["--dp", "2", "--tp", "2", "--zero", "3"], r"rtol 1e-05 atol 1e-06 vs single\)")]:
        rc, out, err = run("train", *args, "--check", "--steps", "5", "--quiet")
        expect(rc == 0, f"{args}: exit code {rc}\n{err}")
        expect_match(r"^check: PASS .*" + verdict + "$", out, f"{args} check")
    rc, out, _ = run("train", "--model", "moe", "--layers", "4", "--pp", "4", "--micro-batches",
                     "8", "--steps", "1", "--quiet")
    expect_match(r"^dtsim train: mesh, moe D 16 F 32 E 4 top-2 L 4 \(17748 params\)", out,
                 "MoE header names its layers")


def case_train_ep_adam():
    # Expert parallelism with Adam at the shape: each expert sums its sources apart,
    # in accumulation's order, so --check finds the last bit equal (it FAILed at 3.5e-05
    # when the experts summed every source's tokens in one chain). L 1 and 2, ep 2 and 4,
    # inside a pipeline, over several expert groups (dp > ep: within tolerance).
    base = ["--model", "moe", "--micro-batches", "4", "--batch", "64", "--optimizer", "adam"]
    bitwise = r"max \|dparam\| 0, max \|dloss\| 0 \(bitwise vs accum\)"
    for args, verdict in [
            (["--layers", "2", "--dp", "2", "--ep", "2"],
             r"max \|dparam\| 0, max \|dloss\| 0 \(rtol 1e-05 atol 1e-06 vs accum\)"),
            (["--layers", "1", "--dp", "2", "--ep", "2", "--algo", "deterministic"], bitwise),
            (["--layers", "2", "--dp", "4", "--ep", "4", "--algo", "deterministic"], bitwise),
            (["--layers", "2", "--dp", "2", "--ep", "2", "--pp", "2", "--algo", "deterministic"],
             bitwise),
            (["--layers", "2", "--dp", "4", "--ep", "2"],
             r"max \|dparam\| \S+, max \|dloss\| \S+ \(rtol 1e-05 atol 1e-06 vs accum\)")]:
        rc, out, err = run("train", *base, *args, "--check", "--quiet")
        expect(rc == 0, f"{args}: exit code {rc}\n{out}{err}")
        expect_match(r"^check: PASS  " + verdict + "$", out, f"{args} check")



def case_walk_sequence():
    """walk --tp T --sequence-parallel: between the regions tp rank r holds tokens
    [r S/T, (r + 1) S/T) (S = 2T here), inside them all S; each all-gather and reduce-scatter
    sends (T-1)/T of the S x D x 4 B activations, their pair per block what plain tp's
    all-reduce sends, 2(T-1)/T of them (worked out here, not read from dtsim)."""
    for tp in [2, 4, 8]:
        rc, out, err = run("walk", "--tp", str(tp), "--sequence-parallel")
        expect(rc == 0 and err == "", f"walk --tp {tp} --sequence-parallel: exit {rc} {err}")
        seq, dim = 2 * tp, 8
        act = seq * dim * 4
        local = " +".join(f"{2 * r}-{2 * r + 1}" for r in range(tp))
        whole = " +".join([f"0-{seq - 1}"] * tp)
        for region in ["embedding \\(this rank's tokens\\)", "attention's pre-norm LN",
                       "MLP's pre-norm LN", "final norm"]:
            expect_match(rf"^{region} +{local}$", out, f"tp {tp}: {region} holds 1/{tp}")
        gathers = re.findall(rf"^  all-gather \([^)]*\) +{whole} +(\d+) B$", out, re.M)
        scatters = re.findall(rf"^  reduce-scatter \(g\), bias, residual +{local} +(\d+) B$",
                              out, re.M)
        share = (tp - 1) * act // tp
        expect(gathers == [str(share)] * 3 and scatters == [str(share)] * 2,
               f"tp {tp}: all-gathers {gathers}, reduce-scatters {scatters}, want {share} B")
        pair = 2 * (tp - 1) * act // tp
        for block in ["attention", "MLP"]:
            expect_match(rf"^  {block}: +sp all-gather \+ reduce-scatter {pair} B; plain tp "
                         rf"all-reduce {pair} B$", out, f"tp {tp}: {block} bytes")
        expect_match(r"^check: the sp run's logits against the plain tp run's: max \|diff\| "
                     r"\S+ \(ok\)$", out, f"tp {tp}: sp and tp agree")
        expect(max(len(line) for line in out.splitlines()) <= 100, f"tp {tp}: over 100 columns")
    print("walk --tp 2, 4, 8 --sequence-parallel: tokens per region and bytes as worked out")
