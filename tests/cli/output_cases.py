"""cli_test.py's output-file cases: no partial files after bad input, --report/--trace/--html
to standard output, devices and full disks, and what a signal mid-run leaves (nothing)."""
import json
import os
import signal
import subprocess
import tempfile

from cli_util import DTSIM, DTSIM_WITH_MUTANTS, expect, expect_match, run


def case_no_partial_files():
    with tempfile.TemporaryDirectory() as d:
        for args in [["--batch", "30"], ["--strategy", "ep"], ["--ranks", "0"]]:
            rc, _, _ = run("train", *args, "--report", "r.json", "--trace", "t.json", cwd=d)
            expect(rc == 2, f"{args}: exit {rc}")
            expect(os.listdir(d) == [], f"{args} left {os.listdir(d)}")
        # The trace path fails after the report's temporary file was made: that one is removed.
        rc, _, _ = run("train", "--report", "r.json", "--trace", "/nonexistent-dir/t", cwd=d)
        expect(rc == 2 and os.listdir(d) == [], f"exit {rc}, left {os.listdir(d)}")
        # Likewise --html, on train and on demo (before any run).
        rc, _, _ = run("train", "--report", "r.json", "--html", "/nonexistent-dir/p.html", cwd=d)
        expect(rc == 2 and os.listdir(d) == [], f"train --html: exit {rc}, left {os.listdir(d)}")
        rc, out, _ = run("demo", "--html", "/nonexistent-dir/p.html", cwd=d)
        expect(rc == 2 and out == "" and os.listdir(d) == [], f"demo --html: exit {rc}")


def case_output_files():
    small = ["train", "--steps", "2", "--quiet"]
    # "-" is standard output: the JSON alone there, the text on stderr.
    for target in ["-", "/dev/stdout"]:
        rc, out, err = run(*small, "--report", target)
        expect(rc == 0, f"--report {target}: exit {rc}\n{err}")
        expect(json.loads(out)["steps"] == 2, f"--report {target}: stdout is the JSON")
        expect_match(r"^dtsim train: ddp", err, f"--report {target}: text on stderr")
        expect_match(r"^report: standard output$", err, f"--report {target}")
    expect(os.path.islink("/dev/stdout") or not os.path.exists("/dev/stdout"),
           "/dev/stdout is still a symlink")
    with tempfile.TemporaryDirectory() as d:
        # A file that is not dtsim's is never replaced, through a symlink neither; dtsim's own
        # outputs and empty files are.
        # notes.md only quotes the marks, away from where dtsim puts them.
        quoted = ('# Notes\n\n{"generator": "dtsim train"}\n<meta name="generator" '
                  'content="dtsim train">\ndtsim-schedule 1\n')
        for name, text in [("notes.json", '{"generator": "someone else"}\n'),
                           ("notes.html", "<!doctype html><p>mine</p>\n"), ("notes.txt", "x"),
                           ("notes.md", quoted)]:
            open(os.path.join(d, name), "w").write(text)
        os.symlink("notes.txt", os.path.join(d, "notes-link"))
        for args in [[*small, "--report", "notes.json"], [*small, "--html", "notes.html"],
                     [*small, "--trace", "notes.txt"], [*small, "--report", "notes-link"],
                     [*small, "--report", "notes.md"], ["demo", "--html", "notes.html"]]:
            rc, out, err = run(*args, cwd=d)
            expect(rc == 2 and out == "" and "is not a file dtsim wrote" in err and
                   len(err.splitlines()) == 1, f"{args}: exit {rc}, {err!r}")
        rc, _, err = run("stress", "--scheduler", "pct", "--ranks", "2", "--schedules", "2",
                         "--schedule-file", "notes.txt", cwd=d)
        expect(rc == 2 and "is not a file dtsim wrote" in err, f"--schedule-file: {rc} {err!r}")
        rc, _, err = run("stress", "--iterations", "1", "--report", "notes.json", cwd=d)
        expect(rc == 2 and "is not a file dtsim wrote" in err, f"stress --report: {rc} {err!r}")
        expect(open(os.path.join(d, "notes.json")).read() == '{"generator": "someone else"}\n'
               and open(os.path.join(d, "notes.txt")).read() == "x" and
               open(os.path.join(d, "notes.md")).read() == quoted, "foreign files untouched")
        expect(sorted(os.listdir(d)) == ["notes-link", "notes.html", "notes.json", "notes.md",
                                         "notes.txt"], f"nothing written: {os.listdir(d)}")
    with tempfile.TemporaryDirectory() as d:
        # A failing search writes its schedule over dtsim's own schedule file; by default to
        # dtsim-schedule-S-I.txt, or beside it when a file that is not dtsim's has that name.
        search = ["stress", "--scheduler", "pct", "--ranks", "4", "--schedules", "200",
                  "--seed", "1", "--mutant", "missing-settle"]
        open(os.path.join(d, "dtsim-schedule-1-3.txt"), "w").write("mine\n")
        rc, out, err = run(*search, cwd=d, binary=DTSIM_WITH_MUTANTS)
        expect(rc == 1 and "replay: dtsim stress --replay dtsim-schedule-1-3-2.txt" in out,
               f"default name taken: exit {rc}, {out[-300:]!r} {err!r}")
        expect(open(os.path.join(d, "dtsim-schedule-1-3.txt")).read() == "mine\n", "untouched")
        for _ in range(2):
            rc, out, err = run(*search, "--schedule-file", "s.txt", cwd=d,
                               binary=DTSIM_WITH_MUTANTS)
            expect(rc == 1 and "replay: dtsim stress --replay s.txt" in out, f"{rc} {err!r}")
        rc, out, _ = run("stress", "--replay", "s.txt", cwd=d, binary=DTSIM_WITH_MUTANTS)
        expect(rc == 1 and "failed as recorded" in out, f"replay: exit {rc} {out[-200:]!r}")
    with tempfile.TemporaryDirectory() as d:
        # A symlink to a file survives; the file it points at gets the report. The file is
        # one dtsim wrote (a trace), so it may be replaced.
        rc, _, err = run(*small, "--trace", "real.json", cwd=d)
        expect(rc == 0, f"exit {rc}: {err}")
        os.chmod(os.path.join(d, "real.json"), 0o640)
        os.symlink("real.json", os.path.join(d, "link.json"))
        rc, out, err = run(*small, "--report", "link.json", "--trace", "t.json", cwd=d)
        expect(rc == 0, f"exit {rc}: {err}")
        expect(os.path.islink(os.path.join(d, "link.json")), "the symlink survives")
        expect(json.load(open(os.path.join(d, "real.json")))["steps"] == 2, "real.json updated")
        for flag, name in [("--html", "page.html"), ("--report", "page.html"),
                           ("--report", "empty")]:
            open(os.path.join(d, "empty"), "w").close()
            rc, _, err = run(*small, flag, name, cwd=d)
            expect(rc == 0, f"{flag} {name} over dtsim's own or an empty file: exit {rc} {err}")
        os.remove(os.path.join(d, "page.html"))
        os.remove(os.path.join(d, "empty"))
        expect(os.stat(os.path.join(d, "real.json")).st_mode & 0o777 == 0o640, "mode kept")
        expect(sorted(os.listdir(d)) == ["link.json", "real.json", "t.json"],
               f"no temporary file left: {os.listdir(d)}")
        mask = os.umask(0)
        os.umask(mask)
        expect(os.stat(os.path.join(d, "t.json")).st_mode & 0o777 == 0o666 & ~mask,
               "a new file gets the usual permissions, not mkstemp's 0600")
        # A device is written in place, never replaced.
        rc, _, err = run(*small, "--report", "/dev/null", cwd=d)
        expect(rc == 0 and os.path.exists("/dev/null") and not os.path.isfile("/dev/null"),
               f"/dev/null: exit {rc} {err}")
        # A write error on the target is exit 1, and no temporary file stays.
        rc, _, err = run(*small, "--report", "/dev/full", cwd=d)
        expect(rc == 1 and "cannot write /dev/full" in err, f"/dev/full: exit {rc} {err!r}")
    # Standard output that cannot be written is an error, not exit 0.
    with open("/dev/full", "w") as full:
        for args in [small, ["estimate", "--params", "7e9"], ["--version"], ["train", "-h"]]:
            p = subprocess.run([DTSIM, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                               timeout=110)
            expect(p.returncode != 0 and "cannot write standard output" in p.stderr,
                   f"{args} > /dev/full: exit {p.returncode}, stderr {p.stderr!r}")


def start(args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    # Default signal actions, even when this script was started with SIGINT ignored.
    return subprocess.Popen([DTSIM, *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def case_signals():
    # SIGINT, SIGTERM or SIGKILL mid-run: nothing is left (the outputs' temporary files exist
    # only while they are written), the process dies of the signal (exit status 130 / 143 in
    # a shell), and what it printed so far is out (line-buffered).
    long_train = ["train", "--dim", "128", "--hidden", "512", "--steps", "100000", "--quiet",
                  "--report", "r.json", "--trace", "t.json"]
    for sig in [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]:
        with tempfile.TemporaryDirectory() as d:
            p = start(long_train, d)
            header = p.stdout.readline()
            expect(header.startswith("dtsim train: ddp"), f"header before the signal: {header!r}")
            expect(os.listdir(d) == [], f"nothing beside the outputs while training: {os.listdir(d)}")
            p.send_signal(sig)
            p.wait(timeout=60)
            expect(p.returncode == -sig, f"{sig!r}: died of it, got {p.returncode}")
            expect(os.listdir(d) == [], f"{sig!r} left {os.listdir(d)}")
    # A killed stress has printed its header (stdout into a pipe is flushed line by line).
    with tempfile.TemporaryDirectory() as d:
        p = start(["stress", "--ranks", "4", "--iterations", "100000000", "--report", "s.json"], d)
        header = p.stdout.readline()
        expect(header.startswith("dtsim stress: 4 ranks"), f"stress header: {header!r}")
        p.kill()
        p.wait(timeout=60)
        expect(os.listdir(d) == [], f"a killed stress left {os.listdir(d)}")
