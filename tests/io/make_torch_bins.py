#!/usr/bin/env python3
"""Writes the fixtures of tests/io/torch_checkpoint_test.cpp into OUT with Debian's torch:

  OUT/<case>/pytorch_model.bin (or shards + pytorch_model.bin.index.json), written by torch.save, and
  OUT/<case>/twin.safetensors: the same tensors, contiguous, as a safetensors file written here by hand
  (independent of the reader under test). Cases: fp32, fp16, bf16, sharded, tied (lm_head sharing the
  embedding's storage), nested ({"model": sd, ...} and {"state_dict": sd, ...}), offset (slices of a
  larger storage), protocol4 (pickle protocol 4: FRAME, STACK_GLOBAL, MEMOIZE), module (an nn.Module's
  state_dict(keep_vars=True): Parameters and the _metadata BUILD), zip64 (fp32's entries re-zipped with
  zip64 records).
  OUT/tiny_bin/: tests/golden/tiny_hf with its model.safetensors as pytorch_model.bin.
  OUT/hostile/*.bin: files a reader must refuse (see HOSTILE below); OUT/hostile/pwned must never appear.

Usage: make_torch_bins.py SOURCE_DIR OUT
"""
import collections
import json
import os
import shutil
import struct
import sys
import zipfile
import zlib

import numpy as np
import torch

ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
SAME_SIZE_INT = {8: torch.int64, 4: torch.int32, 2: torch.int16}


def tensor_bytes(t):
    t = t.detach().contiguous()
    return t.view(SAME_SIZE_INT[t.element_size()]).numpy().tobytes()


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        b = tensor_bytes(tensors[name])
        header[name] = {"dtype": ST_DTYPES[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def state_dict(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    sd = collections.OrderedDict()
    sd["model.embed_tokens.weight"] = torch.randn(7, 4, generator=g).to(dtype)
    sd["model.layers.0.mlp.up_proj.weight"] = torch.randn(3, 4, generator=g).to(dtype)
    sd["model.norm.weight"] = torch.randn(4, generator=g).to(dtype)
    sd["cube"] = torch.randn(2, 3, 5, generator=g).to(dtype)
    sd["scalar"] = torch.tensor(1.5).to(dtype)
    sd["empty"] = torch.zeros(0, 3).to(dtype)
    return sd


def case(out, name, obj, twin, **save_args):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    torch.save(obj, os.path.join(d, "pytorch_model.bin"), **save_args)
    write_safetensors(os.path.join(d, "twin.safetensors"), twin)
    return d


def sharded(out):
    sd = state_dict(torch.float32, seed=1)
    d = os.path.join(out, "sharded")
    os.makedirs(d, exist_ok=True)
    names = list(sd)
    parts = [names[:3], names[3:]]
    weight_map = {}
    for i, part in enumerate(parts):
        file = "pytorch_model-%05d-of-%05d.bin" % (i + 1, len(parts))
        torch.save(collections.OrderedDict((n, sd[n]) for n in part), os.path.join(d, file))
        weight_map.update({n: file for n in part})
    total = sum(t.numel() * t.element_size() for t in sd.values())
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    write_safetensors(os.path.join(d, "twin.safetensors"), sd)


def offsets(out):
    big = torch.arange(60, dtype=torch.float32).reshape(12, 5) / 7
    flat = torch.arange(20, dtype=torch.float16)
    sd = {"full": big, "rows": big[3:7], "flat_slice": flat[4:10], "last_row": big[11]}
    case(out, "offset", sd, {k: v.clone() for k, v in sd.items()})


def zip_entries(path):
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def write_zip(path, entries, zip64=False, deflate=()):
    """A zip as torch.save writes it (stored, data 64-byte aligned through the local extra field); with
    zip64, every central entry's sizes and offset and the end record go through zip64 records; the
    entries named in deflate are compressed."""
    out, central = bytearray(), bytearray()
    for name, data in entries:
        n = name.encode()
        method, stored = (8, zlib.compress(data)[2:-4]) if name in deflate else (0, data)
        crc = zlib.crc32(data)
        offset = len(out)
        pad = (-(offset + 30 + len(n) + 4)) % 64
        extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(stored), len(data), len(n),
                           len(extra)) + n + extra + stored
        if zip64:
            cextra = struct.pack("<HHQQQ", 1, 24, len(data), len(stored), offset)
            sizes = (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
        else:
            cextra, sizes = b"", (len(stored), len(data), offset)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method, 0, 0, crc, sizes[0], sizes[1],
                               len(n), len(cextra), 0, 0, 0, 0, sizes[2]) + n + cextra
    cd_offset = len(out)
    out += central
    if zip64:
        end64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries), len(central),
                           cd_offset)
        out += struct.pack("<IIQI", 0x07064B50, 0, end64, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), cd_offset, 0)
    with open(path, "wb") as f:
        f.write(out)


class System:
    """Pickles as a call of os.system: what a malicious checkpoint holds."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def hostile(out, fp32_bin):
    d = os.path.join(out, "hostile")
    os.makedirs(d, exist_ok=True)
    good = zip_entries(fp32_bin)
    prefix = good[0][0].split("/")[0] + "/"
    pkl = dict(good)[prefix + "data.pkl"]

    def with_pickle(name, data):
        write_zip(os.path.join(d, name), [(n, data if n == prefix + "data.pkl" else b) for n, b in good])

    # A call of os.system (pickled as posix.system) inside an otherwise plain state dict.
    with_pickle("system.bin", pickle_dumps({"w": System("touch " + os.path.join(d, "pwned"))}))
    # A numpy array among the tensors (numpy.core.multiarray._reconstruct).
    torch.save({"w": torch.ones(2), "n": np.zeros(2)}, os.path.join(d, "numpy.bin"))
    # INST ('i'): an opcode that builds an object of any class.
    with_pickle("opcode.bin", b"\x80\x02(i__main__\nX\n.")
    # Stored entries compressed.
    write_zip(os.path.join(d, "compressed.bin"), good, deflate={n for n, _ in good})
    # A storage the pickle names but the archive lacks.
    write_zip(os.path.join(d, "missing_storage.bin"), [(n, b) for n, b in good if n != prefix + "data/1"])
    # A storage entry shorter than its persistent id declares.
    write_zip(os.path.join(d, "short_storage.bin"),
              [(n, b[: len(b) // 2] if n == prefix + "data/0" else b) for n, b in good])
    # A tensor that runs past its storage: the first tensor's storage offset patched from 0 to 20
    # (BINPERSID, then BININT1 offset), so its 28 elements end at 48 in a storage of 28.
    at = pkl.index(b"QK\x00")
    with_pickle("past_storage.bin", pkl[:at] + b"QK\x14" + pkl[at + 3:])
    # A tensor whose strides are not row-major (a transposed view).
    torch.save({"t": torch.ones(3, 4).t()}, os.path.join(d, "transposed.bin"))
    # The legacy, non-zip format.
    torch.save({"w": torch.ones(2)}, os.path.join(d, "legacy.bin"), _use_new_zipfile_serialization=False)
    # A pickle of a list, not a dict.
    torch.save([torch.ones(2)], os.path.join(d, "list.bin"))
    # A dict with something other than tensors and no state dict inside.
    torch.save({"w": torch.ones(2), "step": 5}, os.path.join(d, "mixed.bin"))


def pickle_dumps(obj):
    import pickle
    return pickle.dumps(obj, protocol=2)


def tiny_bin(source_dir, out):
    src = os.path.join(source_dir, "tests/golden/tiny_hf")
    d = os.path.join(out, "tiny_bin")
    os.makedirs(d, exist_ok=True)
    for f in ("config.json", "tokenizer.model"):
        shutil.copy(os.path.join(src, f), d)
    raw = open(os.path.join(src, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    sd = collections.OrderedDict()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        sd[name] = torch.from_numpy(np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").copy()).reshape(info["shape"])
    torch.save(sd, os.path.join(d, "pytorch_model.bin"))


def main():
    source_dir, out = sys.argv[1], sys.argv[2]
    for dtype, name in ((torch.float32, "fp32"), (torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        case(out, name, state_dict(dtype), state_dict(dtype))
    sharded(out)
    sd = state_dict(torch.float32)
    tied = collections.OrderedDict(sd)
    tied["lm_head.weight"] = sd["model.embed_tokens.weight"]
    d = case(out, "tied", tied, {k: v.clone() for k, v in tied.items()})
    case(out, "nested", {"model": sd, "epoch": 3, "optimizer": {"lr": 0.5, "betas": (0.9, 0.95)}}, sd)
    case(out, "nested_state_dict", {"state_dict": sd, "step": 7, "name": "run"}, sd)
    offsets(out)
    case(out, "protocol4", sd, sd, pickle_protocol=4)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    case(out, "module", module.state_dict(keep_vars=True), module.state_dict())
    fp32_bin = os.path.join(out, "fp32", "pytorch_model.bin")
    os.makedirs(os.path.join(out, "zip64"), exist_ok=True)
    write_zip(os.path.join(out, "zip64", "pytorch_model.bin"), zip_entries(fp32_bin), zip64=True)
    shutil.copy(os.path.join(out, "fp32", "twin.safetensors"), os.path.join(out, "zip64"))
    assert torch.equal(torch.load(os.path.join(out, "zip64", "pytorch_model.bin"))["cube"], sd["cube"])
    hostile(out, fp32_bin)
    tiny_bin(source_dir, out)


if __name__ == "__main__":
    main()
