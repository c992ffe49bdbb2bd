#!/usr/bin/env python3
"""The docs' shape (issue 36): README.md is what a newcomer reads in five minutes (at most
300 lines) and links every page of docs/; bench/RESULTS.md links the hand-kept notes rather
than pasting them again; git tracks no build products (.pyc, __pycache__, build/).

  hygiene.py REPO     exit 1 naming each problem
"""
import glob
import os
import re
import subprocess
import sys


def main():
    repo = sys.argv[1]
    problems = []
    readme = open(os.path.join(repo, "README.md")).read()
    n = readme.count("\n")
    if n > 300:
        problems.append(f"README.md has {n} lines; at most 300 (move the rest into docs/)")
    index = os.path.join(repo, "docs", "README.md")
    linked = set(re.findall(r"\]\((?:docs/)?([\w.-]+\.md)", readme))
    if os.path.exists(index):
        linked |= set(re.findall(r"\]\(([\w.-]+\.md)", open(index).read()))
    for page in sorted(glob.glob(os.path.join(repo, "docs", "*.md"))):
        name = os.path.basename(page)
        if name != "README.md" and name not in linked:
            problems.append(f"docs/{name} is linked from neither README.md nor docs/README.md")
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        if not os.path.exists(os.path.join(repo, link)):
            problems.append(f"README.md links {link}, which does not exist")
    results = open(os.path.join(repo, "bench", "RESULTS.md")).read()
    for note in ("results_notes.md", "compute_results.md"):
        body = open(os.path.join(repo, "bench", note)).read().split("\n")
        # a paragraph of the note (its lines 3-8) found in RESULTS.md is a pasted copy
        probe = "\n".join(body[2:8])
        if probe.strip() and probe in results:
            problems.append(f"bench/RESULTS.md pastes bench/{note} again; link it instead")
    tracked = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True)
    if tracked.returncode == 0:
        for f in tracked.stdout.split("\n"):
            if f.endswith(".pyc") or "__pycache__/" in f or f.startswith("build/"):
                problems.append(f"git tracks the build product {f}; git rm --cached it")
    for p in problems:
        print(p)
    if not problems:
        print(f"README.md {n} lines, every docs/ page linked, no pasted notes, no tracked products")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
