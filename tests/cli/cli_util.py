"""What every cli test case shares: the binary under test (argv[1]), running it, and
expectations that end the case with a message naming what differed."""
import os
import re
import subprocess
import sys

DTSIM = os.path.abspath(sys.argv[1])
# dtsim with the stress tester's planted bugs (--mutant), built beside it for tests only.
DTSIM_WITH_MUTANTS = os.path.join(os.path.dirname(DTSIM), "dtsim_with_mutants")


def run(*args, cwd=None, env=None, binary=None):
    full_env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}  # not inherited
    full_env.update(env or {})
    p = subprocess.run([binary or DTSIM, *args], capture_output=True, text=True, cwd=cwd,
                       timeout=110, env=full_env)
    return p.returncode, p.stdout, p.stderr


def expect(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


def expect_match(pattern, text, what):
    expect(re.search(pattern, text, re.M), f"{what}: /{pattern}/ not in output:\n{text}")
