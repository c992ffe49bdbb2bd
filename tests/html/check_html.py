#!/usr/bin/env python3
"""Renders dtsim's --html pages in headless Chromium and checks every chart against the JSON.

usage: check_html.py DTSIM CASE [--screenshot PNG]

Each case runs build/dtsim with --html (and --report where the command has it), loads the
page in Chromium (`--dump-dom`: the DOM after our script ran), and compares every mark the
script drew (data-* attributes of the SVG elements) with the numbers of the JSON report of
the same run: losses and the reference's, memory per rank and category, the rank x rank
bytes and messages of every communicator group, and each rank's seconds per collective.
The page must be self-contained: no src/href/url() that would fetch anything.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

from mesh_tokens import check_tokens  # beside this file

CATEGORIES = ["weights", "gradients", "master_weights", "adam_m", "adam_v", "activations"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-dev-shm-usage"]


class Failure(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failure(what)


def chromium():
    for name in ["chromium", "chromium-browser", "google-chrome"]:
        path = shutil.which(name)
        if path:
            return path
    raise Failure("no chromium found: install it (apt-get install chromium, or "
                  "scripts/quickstart.sh test)")


def browser(page, extra, timeout=120):
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra,
               "file://" + os.path.abspath(page)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    expect(p.returncode == 0, f"chromium exit {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout


class Dom(HTMLParser):
    """Every element as (tag, attrs), in document order, and the embedded JSON."""

    def __init__(self):
        super().__init__()
        self.elements = []
        self.data_json = None
        self._in_data = False
        self._text = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.elements.append((tag, a))
        if tag == "script" and a.get("id") == "dtsim-data":
            self._in_data = True
        self._summary = a if tag == "p" and a.get("class") == "summary" else None

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag == "script" and self._in_data:
            self._in_data = False
            self.data_json = json.loads("".join(self._text))

    def handle_data(self, data):
        if self._in_data:
            self._text.append(data)
        if getattr(self, "_summary", None) is not None:  # a panel's summary line, as text
            self._summary["text"] = self._summary.get("text", "") + data


def render(page):
    text = open(page, encoding="utf-8").read()
    for needle in ["<link", " src=", "@import", "url(", "https://", "<iframe"]:
        expect(needle not in text, f"page is not self-contained: it contains '{needle}'")
    dom = Dom()
    dom.feed(browser(page, ["--dump-dom"]))
    body = [a for t, a in dom.elements if t == "body"]
    expect(body, "no <body> in the rendered DOM")
    expect("data-error" not in body[0], f"the page's script failed: {body[0].get('data-error')}")
    expect("data-rendered" in body[0], "the page's script did not finish (no data-rendered)")
    return dom


def number(s):
    return None if s == "null" else float(s)


def panels_of(dom):
    """Elements grouped by the panel (section data-panel) they belong to, in order."""
    panels, current = [], None
    for tag, a in dom.elements:
        if tag == "section" and "data-panel" in a:
            current = []
            panels.append(current)
        elif current is not None:
            current.append((tag, a))
    return panels


def check_panel(elements, report, where):
    charts = [a["data-chart"] for t, a in elements if "data-chart" in a]
    groups = [g["group"] for g in report["traffic"]]
    timeline = (report.get("pipeline") or {}).get("timeline")
    expect(charts == ["loss", "memory", "time"] + ["timeline"] * bool(timeline) + ["mesh"] +
           ["traffic"] * len(groups),
           f"{where}: charts {charts}, expected loss, memory, time, a timeline for a pipeline, "
           f"the mesh, and traffic for {groups}")
    # The summary names the ranks that ran: single and accum run one, whatever config.ranks.
    summary = next(a.get("text", "") for t, a in elements if a.get("class") == "summary")
    c = report["config"]
    ranks = {"single": "1 rank ·", "accum": f"1 rank accumulating as {c['ranks']} would"}.get(
        c["strategy"], f"{c['ranks']} ranks")
    expect(ranks in summary, f"{where}: summary does not say '{ranks}': {summary}")
    # A run without collectives says why: one rank, or a pipeline's point-to-point sends.
    empty = [a["data-empty"] for t, a in elements if "data-empty" in a]
    has_ops = any(c["seconds"] > 0 for r in report["ranks"] for c in r["collectives"].values())
    want_empty = [] if has_ops else [
        "no collectives (one rank)" if len(report["ranks"]) == 1 else
        "no collectives: the stages only sent point to point" if report.get("pipeline") else
        "no collectives"]
    expect(empty == want_empty, f"{where}: time chart says {empty}, want {want_empty}")

    series = {a["data-series"]: a["data-values"] for t, a in elements if "data-series" in a}
    got = [number(x) for x in series.get("run", "").split(",")]
    expect(got == report["losses"], f"{where}: loss curve {got[:4]}... != report {report['losses'][:4]}...")
    check = report.get("check")
    if check:
        ref = [number(x) for x in series.get("reference", "").split(",")]
        expect(ref == check["reference_losses"], f"{where}: reference curve differs from report")
    else:
        expect("reference" not in series, f"{where}: a reference curve without --check")

    bars = {(int(a["data-rank"]), a["data-category"]): int(a["data-bytes"])
            for t, a in elements if t == "rect" and "data-category" in a}
    want = {(r["rank"], c): r["memory_bytes"][c] for r in report["ranks"] for c in CATEGORIES}
    expect(bars == want, f"{where}: memory bars {sorted(bars.items())[:6]}... != report")

    cells = {(a["data-group"], a["data-metric"], int(a["data-src"]), int(a["data-dst"])):
             int(a["data-value"]) for t, a in elements if t == "rect" and "data-metric" in a}
    want = {(g["group"], m, i, j): g[m][i][j] for g in report["traffic"]
            for m in ["bytes", "messages"] for i in range(len(g[m])) for j in range(len(g[m]))}
    expect(cells == want, f"{where}: traffic cells differ from report "
           f"({len(cells)} drawn, {len(want)} in the report)")
    for i, r in enumerate(report["ranks"]):
        sent = sum(g["bytes"][i][j] for g in report["traffic"] for j in range(len(g["bytes"])))
        expect(sent == r["bytes_sent"], f"{where}: rank {i} traffic row sum {sent} != bytes_sent")

    times = {(a["data-op"], int(a["data-rank"])): float(a["data-seconds"])
             for t, a in elements if t == "rect" and "data-op" in a}
    ops = {op for r in report["ranks"] for op, c in r["collectives"].items() if c["seconds"] > 0}
    want = {(op, r["rank"]): r["collectives"].get(op, {}).get("seconds", 0)
            for op in ops for r in report["ranks"]}
    expect(times == want, f"{where}: collective time bars differ from report")
    if timeline:
        check_timeline(elements, report, where)
    check_mesh(elements, report, where)
    return len(charts)


def mesh_shape(config):
    """(dp, tp, pp, ep, cp) of a report's config, as train/config.cc's TrainConfig::mesh()."""
    n, s = config["ranks"], config["strategy"]
    if s in ("single", "accum"):
        return 1, 1, 1, 1, 1
    if s in ("ddp", "zero1", "zero2", "zero3"):
        return n, 1, 1, 1, 1
    if s == "tp":
        return 1, n, 1, 1, 1
    if s == "dp-tp":
        return n // config["tp_size"], config["tp_size"], 1, 1, 1
    if s == "ep":
        return n, 1, 1, n, 1
    m = config["mesh"]
    return m["dp"], m["tp"], m["pp"], m["ep"], m["cp"]


def check_mesh(elements, report, where):
    """The mesh diagram: one card per rank at its coordinates (rank = (pp dp + dp) tp + tp),
    and what each holds adding up: every tensor-parallel tensor's blocks over the tp ranks of
    a (stage, replica) tile the full tensor; the stages' layers are disjoint and cover the
    model; the experts of an ep group are disjoint and cover each MoE layer's; ZeRO shards
    over a dp group add up to what each rank holds."""
    cards = [a for t, a in elements if a.get("class") == "mesh-rank"]
    dp, tp, pp, ep, cp = mesh_shape(report["config"])
    world = dp * tp * pp * cp
    expect(len(cards) == len(report["ranks"]) == world,
           f"{where}: {len(cards)} mesh cards for {len(report['ranks'])} ranks "
           f"({dp}x{tp}x{pp}x{cp})")
    by_rank = {int(a["data-rank"]): a for a in cards}
    expect(sorted(by_rank) == list(range(world)), f"{where}: mesh ranks {sorted(by_rank)}")
    for g, a in by_rank.items():  # g = ((pp dp + dp) cp + cp) tp + tp
        want = (g // (tp * cp * dp), g // (tp * cp) % dp, g % tp, g // (tp * cp) % dp % ep,
                g // tp % cp)
        got = tuple(int(a[k]) for k in ["data-pp", "data-dp", "data-tp", "data-ep", "data-cp"])
        expect(got == want, f"{where}: rank {g} at (pp, dp, tp, ep, cp) {got}, want {want}")
    if report["config"]["model"] == "gpt":
        check_tokens(by_rank, report["config"], dp, tp, pp, cp, where, expect)
    # Tensor parallelism: "block0.w1 rows 0–31 of 64" per rank; per (stage, replica) and
    # tensor the tp ranks' blocks must tile [0, full) along the split dimension.
    tiles = {}
    for g, a in by_rank.items():
        shards = [x for x in a["data-tp-shards"].split(";") if x]
        expect(bool(shards) == (tp > 1), f"{where}: rank {g} tp shards {shards} at tp {tp}")
        for x in shards:
            tensor, dims = x.split(" ", 1)
            for dim in dims.split(", "):
                axis, first, last, full = re.fullmatch(r"(rows|cols) (\d+)\u2013(\d+) of (\d+)",
                                                       dim).groups()
                key = (int(a["data-pp"]), int(a["data-dp"]), int(a["data-cp"]), tensor, axis,
                       int(full))
                tiles.setdefault(key, []).append((int(first), int(last) + 1))
    for (st, rep, _, tensor, axis, full), blocks in tiles.items():
        blocks.sort()
        # One block per tp rank; a fused tensor (the gpt's qkv: q, k, v rows) one per part.
        expect(len(blocks) % tp == 0 and blocks[0][0] == 0 and blocks[-1][1] == full and
               all(blocks[i][1] == blocks[i + 1][0] for i in range(len(blocks) - 1)),
               f"{where}: {tensor} {axis} over the tp ranks of stage {st} replica {rep}: {blocks}")
    if report["config"]["model"] == "mlp" and tp > 1:
        hidden = report["config"]["shape"]["hidden"]
        for g, a in by_rank.items():
            t = int(a["data-tp"])
            want = f"rows {t * hidden // tp}\u2013{(t + 1) * hidden // tp - 1} of {hidden}"
            expect(any(x.endswith(".w1 " + want) for x in a["data-tp-shards"].split(";")),
                   f"{where}: rank {g} holds no w1 {want}: {a['data-tp-shards']}")
    # Pipeline stages: each layer on exactly one stage (every rank of a stage the same).
    stage_layers = {}
    for g, a in by_rank.items():
        layers = a["data-layers"].split(",")
        st = int(a["data-pp"])
        expect(stage_layers.setdefault(st, layers) == layers, f"{where}: stage {st} ranks differ")
    flat = [x for st in sorted(stage_layers) for x in stage_layers[st]]
    expect(len(flat) == len(set(flat)) and flat, f"{where}: stages' layers overlap: {stage_layers}")
    if report["config"]["model"] == "mlp":
        blocks = report["config"]["shape"]["layers"]
        expect({f"block{i}" for i in range(blocks)} <= set(flat),
               f"{where}: layers {flat} miss a block of {blocks}")
    # Experts: an ep group's ranks hold disjoint experts covering each MoE layer's.
    if report["config"]["model"] == "moe":
        experts = report["config"]["shape"]["experts"]
        groups = {}
        for g, a in by_rank.items():
            for item in [x for x in a["data-experts"].split(";") if x]:
                layer, ids = item.split(":")
                key = (int(a["data-pp"]), int(a["data-tp"]), int(a["data-dp"]) // ep, layer)
                groups.setdefault(key, []).extend(int(i) for i in ids.split(","))
        expect(groups, f"{where}: no experts on the mesh of a moe run")
        for key, ids in groups.items():
            expect(sorted(ids) == list(range(experts)), f"{where}: experts of {key}: {ids}")
    # ZeRO: the dp ranks' shards of one (stage, tp) position add up to its elements.
    owned = {}
    for g, a in by_rank.items():
        if "data-zero-owned" in a:
            key = (int(a["data-pp"]), int(a["data-tp"]))
            owned.setdefault(key, []).append((int(a["data-zero-owned"]), int(a["data-params"])))
    zero = report["config"]["strategy"] in ("zero1", "zero2", "zero3") or (
        report["config"].get("mesh", {}).get("zero", 0) > 0 and dp > 1)
    expect(bool(owned) == zero, f"{where}: ZeRO shards {owned} on a run with zero={zero}")
    if ep == 1:
        for key, shards in owned.items():
            expect(sum(o for o, _ in shards) == shards[0][1] and len(shards) == dp,
                   f"{where}: ZeRO shards of {key} {shards} do not add up to its params")


def check_timeline(elements, report, where):
    """The pipeline timeline: every phase of the report drawn, and the idle share of the
    bars (1 - busy / (stages x span)) equal to the run's wall-time bubble."""
    t = report["pipeline"]["timeline"]
    drawn = sorted((int(a["data-stage"]), a["data-name"], float(a["data-start"]), float(a["data-end"]))
                   for tag, a in elements if tag == "rect" and "data-stage" in a)
    want = sorted((st["stage"], ph["name"], ph["start"], ph["end"])
                  for st in t["stages"] for ph in st["phases"])
    expect(drawn == want and drawn, f"{where}: timeline bars differ from the report's phases")
    p = report["pipeline"]["stages"]
    kinds = {k for *_, k in [(0, a["data-kind"]) for tag, a in elements if "data-stage" in a]}
    expect(kinds >= {"forward", "backward"}, f"{where}: timeline kinds {kinds}")
    expect(len({st for st, *_ in drawn}) == p, f"{where}: timeline rows != {p} stages")
    busy = sum(end - start for _, _, start, end in drawn)
    idle = 1 - busy / (p * t["span_seconds"])
    expect(abs(idle - report["pipeline"]["bubble_wall"]) < 1e-9,
           f"{where}: timeline idle {idle} != bubble_wall {report['pipeline']['bubble_wall']}")
    label = [a for tag, a in elements if "data-idle" in a]
    expect(label and abs(float(label[0]["data-idle"]) - idle) < 1e-9,
           f"{where}: the timeline's idle label {label} != {idle}")
    check_p2p(elements, report, drawn, label[0], where)
    return idle


def check_p2p(elements, report, compute, label, where):
    """The pipeline's sends and receives on the timeline: as many per stage as the 1F1B
    schedule has (stage s sends m activations unless last and m gradients unless first, and
    receives as many), inside the span, and never over a compute bar of their stage (one
    thread runs a stage's actions); their shares are part of the idle share."""
    pipe, span = report["pipeline"], report["pipeline"]["timeline"]["span_seconds"]
    p, m = pipe["stages"], pipe["micro_batches"]
    bars = [(int(a["data-p2p-stage"]), a["data-kind"], float(a["data-start"]), float(a["data-end"]))
            for tag, a in elements if tag == "rect" and "data-p2p-stage" in a]
    expect(bars, f"{where}: no send or receive bars on the timeline")
    if pipe["schedule"] in ("1f1b", "gpipe") and pipe["virtual_stages"] == 1:
        for st in range(p):
            want = m * (st < p - 1) + m * (st > 0)
            for kind in ["send", "receive"]:
                n = sum(1 for s, k, *_ in bars if s == st and k == kind)
                expect(n == want, f"{where}: stage {st} has {n} {kind} bars, the schedule {want}")
    for st in range(p):
        spans = sorted([(a, b) for s, _, a, b in bars if s == st] +
                       [(a, b) for s, _, a, b in compute if s == st])
        expect(all(0 <= a <= b <= span * (1 + 1e-12) for a, b in spans),
               f"{where}: stage {st}: a bar outside [0, {span}]")
        expect(all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)),
               f"{where}: stage {st}: a send or receive overlaps another bar")
    shares = {k: sum(b - a for _, kind, a, b in bars if kind == k) / (p * span)
              for k in ["send", "receive"]}
    for k in shares:
        expect(abs(float(label[f"data-{k}"]) - shares[k]) < 1e-9,
               f"{where}: {k} share {label[f'data-{k}']} != {shares[k]}")
    expect(shares["send"] + shares["receive"] <= float(label["data-idle"]) + 1e-9,
           f"{where}: sends and receives {shares} exceed the idle share")


def dtsim(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
    expect(p.returncode == 0, f"dtsim {' '.join(args)} exit {p.returncode}: {p.stderr[-1500:]}")
    return p.stdout


def case_train(binary, d, args, want_groups):
    page, report = os.path.join(d, "p.html"), os.path.join(d, "r.json")
    dtsim(binary, "train", *args, "--report", report, "--html", page, "--quiet")
    r = json.load(open(report))
    expect([g["group"] for g in r["traffic"]] == want_groups,
           f"groups {[g['group'] for g in r['traffic']]} != {want_groups}")
    dom = render(page)
    panels = panels_of(dom)
    expect(len(panels) == 1, f"{len(panels)} panels for one run")
    n = check_panel(panels[0], r, "train")
    print(f"ok: {n} charts match {report}")
    return page


def case_demo(binary, d):
    page = os.path.join(d, "demo.html")
    out = dtsim(binary, "demo", "--steps", "3", "--html", page, "--quiet")
    dom = render(page)
    data = dom.data_json
    panels = panels_of(dom)
    rows = [a for t, a in dom.elements if t == "tr" and "data-row" in a]
    expect(len(panels) == len(data["panels"]) == len(rows) >= 14,
           f"{len(panels)} panels, {len(rows)} table rows, {len(data['panels'])} runs")
    for p, elements in zip(data["panels"], panels):
        expect(p["title"].split()[0] in out, f"panel {p['title']} not in the printed table")
        check_panel(elements, p["report"], p["title"])
    gpt = ["single gpt", "tp gpt", "tp sp gpt", "cp 4 gpt", "dp 2 x tp 2 sp x cp 2 gpt"]
    expect([p["title"] for p in data["panels"] if p["title"].endswith(" gpt")] == gpt,
           f"gpt panels {[p['title'] for p in data['panels']]}")
    meshes = [a for t, a in dom.elements if a.get("data-chart") == "mesh"]
    expect([(m["data-cp"], m.get("data-sequence-parallel")) for m in meshes[-5:]] ==
           [("1", "0"), ("1", "0"), ("1", "1"), ("4", "0"), ("2", "1")],
           f"gpt meshes' cp and sp: {meshes[-5:]}")
    # Independent runs of the demo's zero2 mlp row and its gpt mixed-mesh row: memory and
    # traffic must be the same.
    gpt_flags = ["--model", "gpt", "--dp", "2", "--tp", "2", "--sequence-parallel", "--cp", "2",
                 "--batch", "8", "--dim", "16", "--heads", "4", "--head-dim", "4", "--seq", "8",
                 "--hidden", "32"]
    for title, flags in [("zero2 mlp", ["--strategy", "zero2", "--ranks", "4", "--batch", "256"]),
                         (gpt[-1], gpt_flags)]:
        report = os.path.join(d, "alone.json")
        dtsim(binary, "train", *flags, "--optimizer", "adam", "--lr", "0.01", "--algo", "ring",
              "--steps", "3", "--report", report, "--quiet")
        alone = json.load(open(report))
        run = next(p["report"] for p in data["panels"] if p["title"] == title)
        expect([r["memory_bytes"] for r in run["ranks"]] ==
               [r["memory_bytes"] for r in alone["ranks"]],
               f"demo {title} memory differs from dtsim train's")
        expect([(g["group"], g["bytes"], g["messages"]) for g in run["traffic"]] ==
               [(g["group"], g["bytes"], g["messages"]) for g in alone["traffic"]],
               f"demo {title} traffic differs from dtsim train's")
    # The cross-strategy charts: per run the largest rank's model state by category and the
    # bytes one rank sends per step, each chart on one scale.
    state = [c for c in CATEGORIES if c != "activations"]
    drawn, sent, chart = {}, {}, None
    for t, a in dom.elements:
        if "data-chart" in a:
            chart = a["data-chart"]
        elif t == "rect" and "data-run" in a:
            key = (int(a["data-run"]), a["data-category"])
            (drawn if chart == "compare-memory" else sent)[key] = float(a["data-bytes"])
    want = {(i, c): max(r["memory_bytes"][c] for r in p["report"]["ranks"])
            for i, p in enumerate(data["panels"]) for c in state}
    expect(drawn == want, f"cross-strategy memory bars differ: {sorted(drawn.items())[:5]}")
    want = {(i, "sent"): p["report"]["bytes_sent_per_step"] for i, p in enumerate(data["panels"])}
    expect(sent == want, "cross-strategy bytes-per-step bars differ from the reports")
    # One memory scale for every panel: the largest stack of any run's ranks.
    scales = [a.get("data-scale-bytes") for t, a in dom.elements if a.get("data-chart") == "memory"]
    most = max(sum(r["memory_bytes"][c] for c in CATEGORIES)
               for p in data["panels"] for r in p["report"]["ranks"])
    expect(len(scales) == len(panels) and {float(x) for x in scales} == {most},
           f"memory scales {set(scales)}: want one, {most}")
    print(f"ok: {len(panels)} demo panels and the table match their reports, one memory scale")
    return page


def case_pipeline(binary, d):
    """The issue's run: --pp 4 --micro-batches 8; its page draws the stages' timeline, whose
    idle share is the wall-time bubble train printed."""
    page, report = os.path.join(d, "pp.html"), os.path.join(d, "r.json")
    out = dtsim(binary, "train", "--pp", "4", "--layers", "4", "--micro-batches", "8",
                "--report", report, "--html", page, "--quiet")
    r = json.load(open(report))
    dom = render(page)
    panels = panels_of(dom)
    expect(len(panels) == 1, f"{len(panels)} panels for one run")
    check_panel(panels[0], r, "train --pp 4")
    idle = check_timeline(panels[0], r, "train --pp 4")
    printed = [line for line in out.split("\n") if line.startswith("pipeline bubble:")]
    expect(printed and f"wall time {100 * idle:.1f}%" in printed[0],
           f"printed {printed}, the page's idle share {100 * idle:.1f}%")
    print(f"ok: the timeline's idle share {100 * idle:.1f}% is the printed wall bubble")
    return page


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, case = sys.argv[1], sys.argv[2]
    shot = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--screenshot" else None
    with tempfile.TemporaryDirectory() as d:
        try:
            if case == "train":
                page = case_train(binary, d, ["--strategy", "dp-tp", "--ranks", "4", "--tp", "2",
                                              "--steps", "8", "--batch", "16", "--check"],
                                  ["world", "tp", "dp"])
            elif case == "train_wide":
                page = case_train(binary, d, ["--strategy", "ddp", "--ranks", "16", "--steps", "4",
                                              "--batch", "32"], ["world"])
            elif case == "train_ep":
                page = case_train(binary, d, ["--strategy", "ep", "--model", "moe", "--ranks", "4",
                                              "--steps", "4", "--batch", "32", "--check"], ["world"])
            elif case == "pipeline":
                page = case_pipeline(binary, d)
            elif case == "demo":
                page = case_demo(binary, d)
            else:
                print(f"unknown case {case}", file=sys.stderr)
                return 2
            if shot:
                browser(page, [f"--screenshot={os.path.abspath(shot)}", "--window-size=1400,1800",
                               "--hide-scrollbars"])
                print(f"screenshot: {shot}")
        except Failure as e:
            print(f"FAIL {case}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
