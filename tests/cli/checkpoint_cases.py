"""cli_test.py's checkpoint cases: dtsim train --save/--resume, dtsim checkpoint inspect and
consolidate (the consolidated file read without dtsim, its parameters hashed to the report's
params_fnv1a), and bad checkpoints refused with one line, exit 2, nothing changed."""
import hashlib
import json
import os
import shutil
import struct
import tempfile

import subprocess

from cli_util import DTSIM, expect, run

try:
    import numpy
except ImportError:  # the standard library reads the same bytes
    numpy = None


def fnv1a64(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def read_safetensors(path):
    """The header (a dict) and the data section of a safetensors file, by the format alone."""
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    return header, raw[8 + length:]


def tensor_values(header, data, name):
    e = header[name]
    begin, end = e["data_offsets"]
    count = 1
    for n in e["shape"]:
        count *= n
    expect(e["dtype"] == "F32" and end - begin == 4 * count, f"{name}: {e} holds its shape")
    if numpy is not None:
        return numpy.frombuffer(data[begin:end], dtype="<f4").reshape(e["shape"])
    return struct.unpack(f"<{count}f", data[begin:end])


def as_bytes(values):
    if numpy is not None:
        return values.astype("<f4").tobytes()
    return struct.pack(f"<{len(values)}f", *values)


def case_checkpoint_consolidate():
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("train", "--dp", "2", "--tp", "2", "--optimizer", "adam", "--steps", "3",
                           "--quiet", "--save", "ck", "--report", "r.json", cwd=d)
        expect(rc == 0, f"train --save: exit {rc}: {err}")
        report = json.load(open(os.path.join(d, "r.json")))
        rc, out, err = run("checkpoint", "inspect", "ck", cwd=d)
        expect(rc == 0 and "step 3" in out and "every checksum verified" in out and
               "dp 2 x tp 2 x pp 1" in out, f"inspect: exit {rc}: {out}{err}")
        rc, out, err = run("checkpoint", "consolidate", "ck", "all.safetensors", cwd=d)
        expect(rc == 0, f"consolidate: exit {rc}: {err}")
        header, data = read_safetensors(os.path.join(d, "all.safetensors"))
        params = sorted((e["data_offsets"][0], name) for name, e in header.items()
                        if name.startswith("params/"))
        blob = b"".join(as_bytes(tensor_values(header, data, n)) for _, n in params)
        expect(fnv1a64(blob) == report["params_fnv1a"],
               f"consolidated params hash {fnv1a64(blob)}, report {report['params_fnv1a']}")
        kinds = sorted({name.split("/")[0] for name in header if name != "__metadata__"})
        expect(kinds == ["adam_m", "adam_v", "params"], f"consolidated kinds {kinds}")
        # A shard file opens the same way: each chunk's shape holds its bytes.
        folder = os.path.join(d, "ck", "step-00000003")
        shard = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))[0]
        sh, sdata = read_safetensors(os.path.join(folder, shard))
        for name in sh:
            if name != "__metadata__":
                tensor_values(sh, sdata, name)
        rc, out, err = run("checkpoint", "consolidate", "ck", "all.safetensors", cwd=d)
        expect(rc == 2 and "exists" in err, f"consolidate onto a file: exit {rc}: {err}")
        # Resumed to 6 steps, the report matches 6 straight steps' (--algo deterministic).
        flags = ["--dp", "2", "--tp", "2", "--optimizer", "adam", "--quiet",
                 "--algo", "deterministic"]
        run("train", *flags, "--steps", "3", "--save", "det", cwd=d)
        rc, _, err = run("train", *flags, "--steps", "6", "--resume", "det", "--report", "a.json",
                         cwd=d)
        expect(rc == 0, f"--resume: exit {rc}: {err}")
        run("train", *flags, "--steps", "6", "--report", "b.json", cwd=d)
        a, b = (json.load(open(os.path.join(d, f))) for f in ("a.json", "b.json"))
        expect(a["params_fnv1a"] == b["params_fnv1a"], "3 + 3 resumed steps differ from 6 straight")
    print(f"consolidated file read with {'numpy' if numpy else 'the standard library'}: "
          "params hash to the report's params_fnv1a; resume bitwise")


def case_checkpoint_check_resume():
    """--check across --resume: the references resume from the same checkpoint, so a resumed
    run on another mesh (or on one rank: single, accum, which also save) passes, and one with
    a planted error fails with exit 1."""
    flags = ["--optimizer", "adam", "--steps", "4", "--quiet", "--resume", "ck"]
    with tempfile.TemporaryDirectory() as d:
        rc, _, err = run("train", "--dp", "4", "--zero", "3", "--optimizer", "adam", "--steps",
                         "2", "--quiet", "--save", "ck", cwd=d)
        expect(rc == 0, f"train --save: exit {rc}: {err}")
        for mesh, save in ((["--dp", "2", "--tp", "2"], []),
                           (["--strategy", "single"], ["--save", "one"]),
                           (["--strategy", "accum", "--ranks", "4"], ["--save", "acc"])):
            rc, out, err = run("train", *mesh, *flags, *save, "--check", cwd=d)
            expect(rc == 0 and "loaded step 2 from ck" in out and "check: PASS" in out,
                   f"{' '.join(mesh)} --resume --check: exit {rc}: {out[-300:]}{err}")
        for saved in ("one", "acc"):
            rc, out, err = run("checkpoint", "inspect", saved, cwd=d)
            expect(rc == 0 and "step 4" in out and "1 rank (" in out,
                   f"inspect {saved}: exit {rc}: {out[:300]}{err}")
        rc, out, err = run("train", "--strategy", "ddp", "--ranks", "4", *flags, "--check",
                           "--pitfall", "forget-divide", cwd=d)
        expect(rc == 1 and "check: FAIL" in out,
               f"--pitfall forget-divide --resume --check: exit {rc}: {out[-300:]}{err}")
    print("--check across --resume: dp 2 x tp 2, single and accum PASS (the last two saving), "
          "a planted error FAILs")


def tree_digest(root):
    h = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(base, f)
            h.update(p.encode() + open(p, "rb").read())
    return h.hexdigest()


def damage(d, how):
    """Makes a damaged copy "bad" of the checkpoint "ck" in d."""
    shutil.copytree(os.path.join(d, "ck"), os.path.join(d, "bad"))
    folder = os.path.join(d, "bad", "step-00000002")
    shard = os.path.join(folder, sorted(f for f in os.listdir(folder) if f.startswith("shard"))[0])
    if how == "missing":
        os.remove(shard)
    elif how == "truncated":
        os.truncate(shard, os.path.getsize(shard) - 8)
    elif how == "corrupted":
        raw = bytearray(open(shard, "rb").read())
        raw[-3] ^= 0x40
        open(shard, "wb").write(raw)
    elif how in ("newer_metadata", "newer_marker"):
        path = (os.path.join(folder, "metadata.json") if how == "newer_metadata"
                else os.path.join(d, "bad", "dtsim-checkpoint.json"))
        j = json.load(open(path))
        j["version"] = 99
        json.dump(j, open(path, "w"))


CKPT_BAD = [  # (damage, arguments, what the one-line error must contain)
    ("missing", ["train", "--resume", "bad", "--steps", "4"], "cannot open checkpoint shard"),
    ("truncated", ["train", "--resume", "bad", "--steps", "4"], "is truncated"),
    ("corrupted", ["train", "--resume", "bad", "--steps", "4"], "fails its checksum"),
    ("corrupted", ["checkpoint", "inspect", "bad"], "fails its checksum"),
    ("newer_metadata", ["train", "--resume", "bad", "--steps", "4"],
     "has format version 99, newer than this dtsim reads (2)"),
    ("newer_marker", ["train", "--resume", "bad", "--steps", "4"],
     "has format version 99, newer than this dtsim reads (2)"),
    (None, ["train", "--resume", "empty", "--steps", "4"],
     "--resume empty is not a dtsim checkpoint (it has no dtsim-checkpoint.json)"),
    (None, ["train", "--resume", "nowhere", "--steps", "4"], "--resume nowhere: no such directory"),
    (None, ["checkpoint", "consolidate", "empty", "x.safetensors"], "is not a dtsim checkpoint"),
    (None, ["train", "--save", "foreign"],
     "--save foreign holds notes.txt, which is not part of a dtsim checkpoint"),
    (None, ["train", "--save", "foreign/notes.txt"], "is a file, not a directory"),
    (None, ["train", "--save", "no/such/dir"], "does not exist; create it first"),
    (None, ["train", "--resume", "ck", "--steps", "4", "--hidden", "32"],
     "tensor params/block0.b1 has shape [64] in the checkpoint but [32] in this model"),
    (None, ["train", "--resume", "ck", "--steps", "2"], "is at step 2 and --steps 2 counts the "
     "whole run; give --steps above 2"),
    (None, ["train", "--resume", "ck", "--steps", "4", "--batch", "16"],
     "was trained with --batch 32 --seed 1: resume with the same"),
    (None, ["train", "--resume", "ck", "--steps", "4", "--optimizer", "adam"],
     "has no tensor adam_m/block0.b1"),
    (None, ["train", "--save-every", "2"], "--save-every needs --save DIR"),
    (None, ["train", "--steps", "4", "--save", "ck"],
     "--save ck already holds a checkpoint (step 2); continue it with --resume ck"),
]


def case_checkpoint_bad_inputs():
    failures = []
    with tempfile.TemporaryDirectory() as base:
        rc, _, err = run("train", "--steps", "2", "--quiet", "--save", "ck", cwd=base)
        expect(rc == 0, f"train --save: exit {rc}: {err}")
        for how, args, message in CKPT_BAD:
            with tempfile.TemporaryDirectory() as d:
                shutil.copytree(os.path.join(base, "ck"), os.path.join(d, "ck"))
                os.mkdir(os.path.join(d, "empty"))
                os.mkdir(os.path.join(d, "foreign"))
                open(os.path.join(d, "foreign", "notes.txt"), "w").write("mine\n")
                if how:
                    damage(d, how)
                before = tree_digest(d)
                rc, out, err = run(*args, cwd=d)
                after = tree_digest(d)
            if rc != 2 or len(err.splitlines()) != 1 or message not in err or out or after != before:
                failures.append(f"[{how}] dtsim {' '.join(args)}: exit {rc}, stderr {err!r}, "
                                f"stdout {out[:80]!r}, changed {after != before}; want exit 2, "
                                f"one line with {message!r}, nothing changed")
    expect(not failures, "\n".join(failures))
    print(f"{len(CKPT_BAD)} bad checkpoints and save paths: exit 2, one line, nothing changed")


def crash_sweep(launch, flags, steps, what):
    """Kills a training run that saves after every step at its 1st, 2nd, ... crash point
    (DTSIM_CHECKPOINT_CRASH_AT: between every write, fsync and rename of a save) until a run
    gets through; after each kill the directory holds the last committed checkpoint, whole
    (its parameters hash to the straight run's of that step) or none, and a resume from it
    (saving into it again) ends bitwise where the straight run does."""
    with tempfile.TemporaryDirectory() as d:
        want = {}
        for k in range(1, steps + 1):
            rc, _, err = launch(["train", *flags, "--steps", str(k), "--report", f"r{k}.json"], d)
            expect(rc == 0, f"{what}: straight {k} steps: exit {rc}: {err}")
            want[k] = json.load(open(os.path.join(d, f"r{k}.json")))["params_fnv1a"]
        kills, seen = 0, set()
        for n in range(1, 200):
            ck = os.path.join(d, f"ck{n}")
            rc, _, err = launch(["train", *flags, "--steps", str(steps), "--save-every", "1",
                                 "--save", ck], d, {"DTSIM_CHECKPOINT_CRASH_AT": str(n)})
            if rc == 0:
                break
            kills += 1
            marker = os.path.join(ck, "dtsim-checkpoint.json")
            if not os.path.exists(marker):
                rc, _, err = run("checkpoint", "inspect", ck)
                expect(rc == 2 and "is not a dtsim checkpoint" in err,
                       f"{what}: killed at point {n} before any commit: inspect exit {rc}: {err}")
                seen.add(0)
                continue
            step = json.load(open(marker))["step"]
            seen.add(step)
            out = os.path.join(d, f"c{n}.safetensors")
            rc, _, err = run("checkpoint", "consolidate", ck, out)
            expect(rc == 0, f"{what}: killed at point {n}: consolidate exit {rc}: {err}")
            header, data = read_safetensors(out)
            params = sorted((e["data_offsets"][0], name) for name, e in header.items()
                            if name.startswith("params/"))
            got = fnv1a64(b"".join(as_bytes(tensor_values(header, data, p)) for _, p in params))
            expect(got == want[step], f"{what}: killed at point {n}: the checkpoint at step "
                   f"{step} hashes {got}, the straight run {want[step]}: a mix")
            if step < steps:
                rc, _, err = launch(["train", *flags, "--steps", str(steps), "--resume", ck,
                                     "--save", ck, "--report", f"a{n}.json"], d)
                expect(rc == 0, f"{what}: resume after a kill at point {n}: exit {rc}: {err}")
                got = json.load(open(os.path.join(d, f"a{n}.json")))["params_fnv1a"]
                expect(got == want[steps], f"{what}: resumed after a kill at point {n}: {got}")
        expect(rc == 0 and kills >= steps and seen >= set(range(steps)),
               f"{what}: {kills} kills saw committed steps {sorted(seen)}; last exit {rc}")
        print(f"{what}: killed at each of {kills} points of {steps} saves; always the last "
              f"committed checkpoint (steps seen {sorted(seen)}), whole; resumed bitwise")


def run_with(command, cwd, env):
    full_env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    full_env.update(env or {})
    p = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=110,
                       env=full_env)
    return p.returncode, p.stdout, p.stderr


CRASH_FLAGS = ["--dp", "2", "--zero", "3", "--optimizer", "adam", "--algo", "deterministic",
               "--quiet"]


def case_checkpoint_crash():
    def launch(args, cwd, env=None):
        return run(*args, cwd=cwd, env=env)
    crash_sweep(launch, [*CRASH_FLAGS, "--ranks", "2"], 3, "threads")


def case_checkpoint_crash_mpi():
    mpiexec = os.environ["DTSIM_MPIEXEC"].split("|")

    def launch(args, cwd, env=None):
        xs = [a for k in (env or {}) for a in ("-x", k)]
        return run_with(mpiexec + ["-np", "2", *xs, DTSIM, *args], cwd, env)
    crash_sweep(launch, CRASH_FLAGS, 2, "mpirun -np 2")


def case_checkpoint_mpi_reshard():
    """Saved by 8 MPI processes (dp 4 x tp 2, ZeRO 1), resumed on 3 rank threads (dp 3) with
    --check (PASS): the resumed steps' losses match 4 straight steps on either mesh within fp32
    round-off."""
    mpiexec = os.environ["DTSIM_MPIEXEC"].split("|")
    flags = ["--optimizer", "adam", "--batch", "48", "--quiet"]
    eight = ["--dp", "4", "--tp", "2", "--zero", "1"]
    with tempfile.TemporaryDirectory() as d:
        rc, _, err = run_with(mpiexec + ["-np", "8", DTSIM, "train", *eight, *flags, "--steps", "2",
                                         "--save", "ck"], d, None)
        expect(rc == 0, f"mpirun -np 8 --save: exit {rc}: {err}")
        rc, out, err = run("checkpoint", "inspect", "ck", cwd=d)
        expect(rc == 0 and "8 ranks (dp 4 x tp 2" in out and
               "shard-00007-of-00008.safetensors" in open(os.path.join(
                   d, "ck", "step-00000002", "metadata.json")).read(),
               f"inspect: exit {rc}: {out}{err}")
        rc, out, err = run("train", "--dp", "3", *flags, "--steps", "4", "--resume", "ck",
                           "--report", "resumed.json", "--check", cwd=d)
        expect(rc == 0 and "check: PASS" in out, f"--dp 3 --resume --check: exit {rc}: {err}")
        resumed = json.load(open(os.path.join(d, "resumed.json")))["losses"]
        for mesh in (eight, ["--dp", "3"]):
            rc, _, err = run("train", *mesh, *flags, "--steps", "4", "--report", "s.json", cwd=d)
            straight = json.load(open(os.path.join(d, "s.json")))["losses"][2:]
            expect(len(resumed) == 2 and all(abs(a - b) <= 1e-6 + 1e-5 * abs(b)
                                             for a, b in zip(resumed, straight)),
                   f"resumed losses {resumed}, straight on {' '.join(mesh)} {straight}")
    print("saved by mpirun -np 8, resumed on 3 rank threads: --check passes, losses continue "
          "within fp32 tolerance of both meshes' straight runs")
