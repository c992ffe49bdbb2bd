#!/usr/bin/env python3
"""The README's quoted outputs against the program: every ```sh block of `build/dtsim ...`
commands whose next code block (prose may stand between) is a plain ``` block is an example,
and that block is what the commands print. The example passes when the block's lines, in
order, are among the lines the commands print now (stdout and stderr), after what varies
from run to run is masked: times (`110 us`, `2.6 s`, `(17.1 s)`), a pipeline's wall-time
share and the load average; runs of spaces count as one. A `...` line in the block stands
for lines left out. Every command must exit 0, or 1 where the block quotes a FAIL (a stress
search that finds its planted bug), and a block must quote at least one line.

  readme_outputs.py --list README.md            the examples' names, one per line
  readme_outputs.py README.md DTSIM NAME        runs one example; exit 1 naming the line

Skipped, and so not listed: blocks with mpirun or scripts/ (the MPI and sanitizer tests
cover those commands). The README's numbers are those of dtsim's own GEMM kernel, AVX2/FMA
or AVX-512 (the Quick start's on such a machine; the two give the same bits): a build with
OpenBLAS's GEMMs (`dtsim --version`) rounds otherwise, and every example exits 77, which
ctest reads as skipped.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

VARYING = [
    (re.compile(r"\d+(\.\d+)?(e[-+]?\d+)? ?(ns|us|ms|s)\b"), "<time>"),
    (re.compile(r"wall time \d+(\.\d+)?%"), "wall time <pct>"),
    (re.compile(r"load average [^)]*"), "load average <load>"),
]


def examples(readme):
    """(name, line number, commands, expected lines) for every example of the README."""
    lines = open(readme).read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            blocks.append((i + 1, lines[i][3:].strip(), lines[i + 1:j]))
            i = j + 1
        else:
            i += 1
    out, names = [], set()
    for (line, lang, body), (_, next_lang, expected) in zip(blocks, blocks[1:]):
        if lang != "sh" or next_lang != "":
            continue
        text = "\n".join(body).replace("\\\n", " ")
        commands = [c.strip() for c in text.split("\n") if c.strip() and not c.startswith("#")]
        if not commands or not all(c.startswith("build/dtsim ") for c in commands):
            continue
        words = [w for w in shlex.split(commands[0])[1:] if not w.startswith("-")][:1]
        flags = [w.lstrip("-") for w in shlex.split(commands[0])[2:]][:6]
        name = re.sub(r"[^a-z0-9]+", "_", "_".join(words + flags).lower()).strip("_")
        while name in names:
            name += "_again"
        names.add(name)
        out.append((name, line, commands, expected))
    return out


def masked(text):
    for pattern, mask in VARYING:
        text = pattern.sub(mask, text)
    return " ".join(text.split())


def main():
    if sys.argv[1] == "--list":
        for name, *_ in examples(sys.argv[2]):
            print(name)
        return 0
    readme, dtsim, wanted = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    version = subprocess.run([dtsim, "--version"], capture_output=True, text=True).stdout
    if "GEMM avx2-fma" not in version and "GEMM avx512-fma" not in version:
        print(f"skipped: the README's outputs are dtsim's GEMM kernel's; this is {version.strip()}")
        return 77
    [(name, line, commands, expected)] = [e for e in examples(readme) if e[0] == wanted]
    if not any(x.strip() and x.strip() != "..." for x in expected):
        print(f"README.md:{line}: the block after `{commands[0]}` quotes nothing")
        return 1
    want_rc = 1 if any("FAIL" in x for x in expected) else 0
    printed = []
    with tempfile.TemporaryDirectory() as d:  # the examples' --report and --trace files
        for command in commands:
            args = shlex.split(command)[1:]
            env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
            p = subprocess.run([dtsim, *args], capture_output=True, text=True, cwd=d, env=env,
                               timeout=300)
            printed += (p.stdout + p.stderr).split("\n")
            if p.returncode not in (0, want_rc):
                print(f"README.md:{line}: `{command}` exited {p.returncode}, not {want_rc}:\n"
                      + p.stdout + p.stderr)
                return 1
    have = [masked(x) for x in printed]
    at = 0
    for k, want in enumerate(expected):
        if want.strip() == "...":
            continue
        m = masked(want)
        while at < len(have) and have[at] != m:
            at += 1
        if at == len(have):
            print(f"README.md:{line + k + 2}: `{want.strip()}` is not printed (in this order) by")
            for c in commands:
                print("  " + c)
            print("which print now:\n" + "\n".join("  " + x for x in printed))
            return 1
        at += 1
    print(f"{name}: the {len(expected)} lines of README.md:{line} are what {len(commands)} "
          f"command(s) print")
    return 0


if __name__ == "__main__":
    sys.exit(main())
