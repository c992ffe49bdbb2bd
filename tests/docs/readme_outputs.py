#!/usr/bin/env python3
"""Every command that README.md and docs/*.md show, run as shown, against what they quote.

An example is one of:
- a ```sh block: its commands (a `\\` continues a line; a `<<'X'` here-document runs to its
  X line) run one by one through bash in a fresh folder where `build/dtsim` is the binary
  under test; if the next code block (prose may stand between) is a plain ``` block, that
  block is what the commands print;
- a plain ``` block whose lines start `$ `: a terminal transcript; the `$ ` lines run as one
  bash script (so `echo $?` prints the previous command's exit code), and the other lines
  are what it prints.
Quoted lines must appear, in order, among the lines printed (stdout and stderr), after
what varies from run to run is masked: times (`110 us`, `2.6 s`, `(17.1 s)`), a pipeline's
wall-time share and the load average; runs of spaces count as one. A `...` line stands for
lines left out. Every command must exit 0, or 1 where the block quotes a FAIL (a stress
search that finds its planted bug, a --check that fails), or what a trailing `# exit N`
comment on it states.

A block that cannot run here (it installs packages, needs two hosts, or is a sanitizer
build) says so in an HTML comment on the line before it: `<!-- docs-test: skip: REASON -->`;
the reason is printed by --list-skipped. A ```sh block without that comment is always run,
so every command shown runs or says why not. mpirun blocks run when mpirun is installed.

Commands named in prose, `dtsim train --pp 4` or `train --pp 4` in backticks (outside the
fenced blocks), are one example per page, `<page>_inline`. Each is checked by the real
command line without running it: with DTSIM_DRY_RUN=1 dtsim parses and validates it as the
command would (flags, values, their combination, output paths) and exits 0 where the work
would start; a `|` between values (`--recompute none|selective|full`) is each value. One
with placeholders (`DIR`, `FILE`, `<command>`, `...`), or naming a command alone
(`dtsim checkpoint inspect`), is checked against that command's --help: the command exists
and has every flag named. A `scripts/...` span names a script that must exist. Shell
pipes and redirections after the command are left out. The skip comment on the span's line
or the line before skips the spans of that line; `<!-- docs-test: exit N -->` on its line
says that its spans must be refused with exit code N (a usage error is 2).

  readme_outputs.py --list FILE...                the examples' names, one per line
  readme_outputs.py --list-skipped FILE...        the skipped blocks and their reasons
  readme_outputs.py DTSIM NAME FILE...            runs one example; exit 1 naming the line

The quoted numbers are those of dtsim's own GEMM kernel, AVX2/FMA or AVX-512 (the two give
the same bits): on a build with OpenBLAS's GEMMs (`dtsim --version`) an example that
quotes output exits 77, which ctest reads as skipped; one that quotes nothing still runs.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

VARYING = [
    (re.compile(r"\d+(\.\d+)?(e[-+]?\d+)? ?(ns|us|ms|s)\b"), "<time>"),
    (re.compile(r"wall time \d+(\.\d+)?%"), "wall time <pct>"),
    (re.compile(r"load average [^)]*"), "load average <load>"),
]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = re.compile(r"<!-- docs-test: skip: (.+?) -->")


def blocks(path):
    """(line, lang, body, skip reason or None) for every fenced block of a markdown file."""
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            m = SKIP.search(lines[i - 1]) if i else None
            out.append((i + 1, lines[i][3:].strip(), lines[i + 1:j], m.group(1) if m else None))
            i = j + 1
        else:
            i += 1
    return out


def commands_of(body):
    """The shell commands of a ```sh block: continuation lines joined, here-documents kept
    with their command, comment lines dropped."""
    out, i = [], 0
    while i < len(body):
        line = body[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(body):
            line = line[:-1] + " " + body[i].strip()
            i += 1
        m = re.search(r"<<-?'?(\w+)'?", line)
        if m:
            while i < len(body) and body[i].strip() != m.group(1):
                line += "\n" + body[i]
                i += 1
            line += "\n" + body[i]
            i += 1
        out.append(line)
    return out


def name_of(path, command):
    stem = os.path.splitext(os.path.basename(path))[0].lower()
    stem = "readme" if stem == "readme" else "docs_" + stem
    words = re.sub(r"^\$ ", "", command.split("\n")[0]).split(" #")[0].split()
    if words and words[0] == "mpirun":  # "mpi" and what follows build/dtsim
        at = next((k for k, w in enumerate(words) if w.endswith("dtsim")), 0)
        words = ["mpi"] + words[at + 1:]
    elif words and words[0].endswith("dtsim"):
        words = words[1:]
    words = [w for w in words if not re.fullmatch(r"[<>|&;=].*", w)][:7]
    return re.sub(r"[^a-z0-9]+", "_", "_".join([stem] + words).lower()).strip("_")


def examples(paths):
    """(name, path, line, kind, commands, expected) for every example of the files."""
    out, names = [], set()
    for path in paths:
        bl = blocks(path)
        for k, (line, lang, body, skip) in enumerate(bl):
            if skip:
                continue
            if lang == "sh":
                expected = None
                if k + 1 < len(bl) and bl[k + 1][1] == "" and not bl[k + 1][3] and not any(
                        x.startswith("$ ") for x in bl[k + 1][2]):
                    expected = bl[k + 1][2]
                cmds = commands_of(body)
                if not cmds:
                    continue
                kind = "sh"
            elif lang == "" and any(x.startswith("$ ") for x in body):
                cmds = [x[2:] for x in body if x.startswith("$ ")]
                expected = [x for x in body if not x.startswith("$ ")]
                kind = "transcript"
            else:
                continue
            name = name_of(path, cmds[0])
            while name in names:
                name += "_again"
            names.add(name)
            out.append((name, path, line, kind, cmds, expected))
        if inline_commands(path):
            name = name_of(path, "") + "_inline"
            if os.path.basename(os.path.dirname(os.path.abspath(path))) == "docs" and \
                    os.path.basename(path) == "README.md":
                name = "docs_readme_inline"  # docs/README.md beside the top README.md
            while name in names:
                name += "_again"
            names.add(name)
            out.append((name, path, 1, "inline", [], None))
    return out


INLINE_SPAN = re.compile(r"`([^`\n]+)`")
COMMAND_NAMES = ("train", "walk", "stress", "estimate", "demo", "checkpoint")
PLACEHOLDER = re.compile(r"<.*>|\.\.\.|[A-Z][A-Z0-9_]*(\.[a-z]+)?")


EXIT = re.compile(r"<!-- docs-test: exit (\d+) -->")


def inline_commands(path):
    """(line, span, skip reason or None, exit code) for every command named in prose in
    `path`; the exit code is 0 unless `<!-- docs-test: exit N -->` on its line says N."""
    out, fenced, lines = [], False, open(path).read().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        skip = SKIP.search(line) or (SKIP.search(lines[i - 1]) if i else None)
        code = EXIT.search(line)
        for m in INLINE_SPAN.finditer(line):
            span = m.group(1).strip()
            if span.endswith(":") or "->" in span:  # output quoted, or a dependency arrow
                continue
            if (re.match(r"(build/)?dtsim(_with_mutants)?( |$)", span)
                    or re.match(r"(%s) [-a-z]" % "|".join(COMMAND_NAMES), span)
                    or span.startswith("scripts/")):
                out.append((i + 1, span, skip.group(1) if skip else None,
                            int(code.group(1)) if code else 0))
    return out


def inline_variants(span):
    """The argv lists (binary first) a span stands for: its `a|b` values each."""
    span = re.split(r" (\||>|2>|&&|;) ", span)[0]  # the command, without pipes/redirections
    words = span.split()
    if not re.match(r"(build/)?dtsim", words[0]):
        words = ["dtsim"] + words
    binary = "build/dtsim_with_mutants" if words[0].endswith("dtsim_with_mutants") else "build/dtsim"
    variants = [[binary]]
    for w in words[1:]:
        choices = w.split("|") if "|" in w and not w.startswith("|") else [w]
        variants = [v + [c] for v in variants for c in choices]
    return variants


def check_inline(argv, d, env, want=0):
    """"" when the command line `argv` passes (exits `want` under the dry run), else what is
    wrong; None when its binary is not built."""
    words = argv[1:]
    binary = os.path.join(d, argv[0])
    if not os.path.exists(binary):
        return None  # dtsim_with_mutants not built: skipped
    template = any(PLACEHOLDER.fullmatch(w) for w in words) or all(
        re.fullmatch(r"[a-z]+", w) for w in words)
    if not template:
        p = subprocess.run([binary, *words], capture_output=True, text=True, cwd=d,
                           env=dict(env, DTSIM_DRY_RUN="1"), timeout=120)
        if p.returncode != want:
            return (f"exit {p.returncode}, not {want}, under DTSIM_DRY_RUN=1: "
                    f"{(p.stderr + p.stdout).strip()[-600:]}")
        return ""
    path = []
    for w in words:
        if not re.fullmatch(r"[a-z]+", w):
            break
        path.append(w)
    p = subprocess.run([binary, *path, "--help"], capture_output=True, text=True, cwd=d, env=env,
                       timeout=60)
    if p.returncode != 0:
        return f"`{' '.join([argv[0], *path])} --help` exit {p.returncode}: {p.stderr.strip()[-300:]}"
    missing = [w for w in words if w.startswith("--") and w not in ("--help",) and
               not re.search(r"(^|[\s,])%s\b" % re.escape(w.split("=")[0]), p.stdout)]
    return f"{' '.join([argv[0], *path])} has no {', '.join(missing)}" if missing else ""


def run_inline(dtsim, path):
    where = os.path.relpath(path)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")}
    bad, checked = [], 0
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "build"))
        os.symlink(dtsim, os.path.join(d, "build", "dtsim"))
        mutants = os.path.join(os.path.dirname(dtsim), "dtsim_with_mutants")
        if os.path.exists(mutants):
            os.symlink(mutants, os.path.join(d, "build", "dtsim_with_mutants"))
        for line, span, skip, want in inline_commands(path):
            if skip:
                print(f"{where}:{line}: `{span}` skipped: {skip}")
                continue
            if span.startswith("scripts/"):
                script = os.path.join(ROOT, span.split()[0])
                ok = os.access(script, os.X_OK)
                print(f"{where}:{line}: `{span}`: {'ok' if ok else 'no such script'}")
                if not ok:
                    bad.append(f"{where}:{line}: `{span}`: {span.split()[0]} is not an executable script")
                continue
            for argv in inline_variants(span):
                why = check_inline(argv, d, env, want)
                shown = " ".join(argv)
                print(f"{where}:{line}: `{shown}`: " + ("skipped: not built" if why is None else why or "ok"))
                checked += why is not None
                if why:
                    bad.append(f"{where}:{line}: `{span}` ({shown}): {why}")
    for b in bad:
        print("FAIL " + b)
    print(f"{len(bad)} of {checked} commands named in {where}'s prose fail")
    return 1 if bad else 0


def masked(text):
    for pattern, mask in VARYING:
        text = pattern.sub(mask, text)
    return " ".join(text.split())


def run(dtsim, name, paths):
    [(name, path, line, kind, commands, expected)] = [e for e in examples(paths) if e[0] == name]
    if kind == "inline":
        return run_inline(dtsim, path)
    where = f"{os.path.relpath(path)}:{line}"
    if expected is not None:
        version = subprocess.run([dtsim, "--version"], capture_output=True, text=True).stdout
        if "GEMM avx2-fma" not in version and "GEMM avx512-fma" not in version:
            print(f"skipped: the docs' outputs are dtsim's GEMM kernel's; this is {version.strip()}")
            return 77
        if not any(x.strip() and x.strip() != "..." for x in expected):
            print(f"{where}: the block after `{commands[0]}` quotes nothing")
            return 1
    if any(c.split()[0] == "mpirun" for c in commands) and not shutil.which("mpirun"):
        print(f"skipped: {where} runs mpirun, which is not installed")
        return 77
    want_rc = 1 if expected and any("FAIL" in x for x in expected) else 0
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")}
    printed = []
    with tempfile.TemporaryDirectory() as d:  # the examples' output files land here
        os.mkdir(os.path.join(d, "build"))
        os.symlink(dtsim, os.path.join(d, "build", "dtsim"))
        # The test-only binary with planted bugs, and the repository's scripts, as shown.
        mutants = os.path.join(os.path.dirname(dtsim), "dtsim_with_mutants")
        if os.path.exists(mutants):
            os.symlink(mutants, os.path.join(d, "build", "dtsim_with_mutants"))
        os.symlink(os.path.join(ROOT, "scripts"), os.path.join(d, "scripts"))
        scripts = ["\n".join(commands)] if kind == "transcript" else commands
        for script in scripts:
            # A transcript shows what a terminal shows: stdout and stderr as they come.
            p = subprocess.run(["bash", "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT if kind == "transcript" else subprocess.PIPE,
                               text=True, cwd=d, env=env, timeout=300)
            printed += (p.stdout + (p.stderr or "")).split("\n")
            # A command that must fail says so: `... # exit 1`.
            stated = re.search(r"#\s*exit (\d+)\s*$", script)
            want = (int(stated.group(1)),) if stated else (0, want_rc)
            if p.returncode not in want:
                print(f"{where}: `{script}` exited {p.returncode}, not {' or '.join(map(str, set(want)))}:\n"
                      + p.stdout + (p.stderr or ""))
                return 1
    if expected is None:
        print(f"{name}: the {len(commands)} command(s) of {where} ran (they quote no output)")
        return 0
    have = [masked(x) for x in printed]
    at = 0
    for k, want in enumerate(expected):
        if want.strip() == "...":
            continue
        m = masked(want)
        while at < len(have) and have[at] != m:
            at += 1
        if at == len(have):
            out_line = line + k + 1 if kind == "transcript" else "the block after it"
            print(f"{where}: `{want.strip()}` ({out_line}) is not printed (in this order) by")
            for c in commands:
                print("  " + c)
            print("which print now:\n" + "\n".join("  " + x for x in printed))
            return 1
        at += 1
    print(f"{name}: the {len(expected)} lines quoted at {where} are what "
          f"{len(commands)} command(s) print")
    return 0


def main():
    if sys.argv[1] == "--list":
        for name, *_ in examples(sys.argv[2:]):
            print(name)
        return 0
    if sys.argv[1] == "--list-skipped":
        for path in sys.argv[2:]:
            for line, _, body, skip in blocks(path):
                if skip:
                    print(f"{os.path.relpath(path)}:{line}: {skip}")
            for line, span, skip, _ in inline_commands(path):
                if skip:
                    print(f"{os.path.relpath(path)}:{line}: `{span}`: {skip}")
        return 0
    return run(os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
