"""cli_test.py's checkpoint cases: dtsim train --save/--resume, dtsim checkpoint inspect and
consolidate (the consolidated file read without dtsim, its parameters hashed to the report's
params_fnv1a), and bad checkpoints refused with one line, exit 2, nothing changed."""
import hashlib
import json
import os
import shutil
import struct
import tempfile

from cli_util import expect, run

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
        j["version"] = 2
        json.dump(j, open(path, "w"))


CKPT_BAD = [  # (damage, arguments, what the one-line error must contain)
    ("missing", ["train", "--resume", "bad", "--steps", "4"], "cannot open checkpoint shard"),
    ("truncated", ["train", "--resume", "bad", "--steps", "4"], "is truncated"),
    ("corrupted", ["train", "--resume", "bad", "--steps", "4"], "fails its checksum"),
    ("corrupted", ["checkpoint", "inspect", "bad"], "fails its checksum"),
    ("newer_metadata", ["train", "--resume", "bad", "--steps", "4"],
     "has format version 2, newer than this dtsim reads (1)"),
    ("newer_marker", ["train", "--resume", "bad", "--steps", "4"],
     "has format version 2, newer than this dtsim reads (1)"),
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
    (None, ["train", "--resume", "ck", "--steps", "4", "--check"], "--check with --resume"),
    (None, ["train", "--save-every", "2"], "--save-every needs --save DIR"),
    (None, ["train", "--strategy", "single", "--save", "new"], "--save and --resume run on the mesh"),
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
