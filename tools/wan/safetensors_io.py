"""safetensors files without the safetensors package: write (streaming, one
tensor at a time), shard with an index, read back; bf16 rounding.

    entries = {"w": Entry("BF16", (4, 8), lambda: array_f32)}
    write_safetensors("model.safetensors", entries)
    write_sharded(folder, "model", entries, shards=2)      # model-00001-of-00002.safetensors ...
    tensors = read_safetensors("model.safetensors")       # name -> float32/int numpy array

Layout as the reference writer: u64 little-endian header length, compact
JSON header ({"__metadata__": {"format": "pt"}} first) padded with spaces to
a multiple of 8, tensors in name order with no gaps. BF16 values are
produced as float32 and stored as their upper 16 bits after rounding to
nearest even (bf16_round gives the same numbers as float32).
"""
import collections
import json
import math
import os
import struct
import types

import numpy as np

ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4}
NUMPY = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4")}

# produce() -> a numpy array (float32 for BF16), or a generator of arrays
# whose C-order concatenation is the tensor (for tensors too big to hold).
Entry = collections.namedtuple("Entry", "dtype shape produce")


def bf16_bits(a):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def bf16_round(a):
    """float32 array holding the nearest bfloat16 values."""
    return (bf16_bits(a).astype(np.uint32) << np.uint32(16)).view(np.float32).reshape(np.shape(a))


def nbytes(entry):
    return math.prod(entry.shape) * ITEMSIZE[entry.dtype]


def encode(entry):
    """The entry's bytes, one produced piece at a time."""
    out = entry.produce()
    pieces = out if isinstance(out, types.GeneratorType) else [out]
    count = 0
    for arr in pieces:
        arr = np.asarray(arr)
        count += arr.size
        if entry.dtype == "BF16":
            yield bf16_bits(arr).astype("<u2").tobytes()
        else:
            yield np.ascontiguousarray(arr, dtype=NUMPY[entry.dtype]).tobytes()
        if not isinstance(out, types.GeneratorType):
            assert arr.shape == tuple(entry.shape), f"{arr.shape} != {tuple(entry.shape)}"
    assert count == math.prod(entry.shape), f"{count} values for shape {entry.shape}"


def write_safetensors(path, entries, progress=None):
    """Write `entries` (name -> Entry) to `path`; returns the data size.
    progress(name, bytes) is called after each tensor."""
    names = sorted(entries)
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in names:
        size = nbytes(entries[name])
        header[name] = {"dtype": entries[name].dtype, "shape": list(entries[name].shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in names:
            for data in encode(entries[name]):
                f.write(data)
            if progress:
                progress(name, nbytes(entries[name]))
    return offset


def plan_shards(entries, shards=None, max_bytes=None):
    """Cut the entries' order into consecutive groups: `shards` of about
    equal size, or as few as keep each under `max_bytes` (a tensor larger
    than that gets a shard of its own), as save_pretrained does."""
    names = list(entries)
    sizes = [nbytes(entries[n]) for n in names]
    groups, current, acc = [], [], 0
    if shards:
        total = sum(sizes)
        cuts, acc = [], 0
        for i, size in enumerate(sizes):
            if acc >= total * (len(cuts) + 1) / shards and len(cuts) < shards - 1:
                cuts.append(i)
            acc += size
        bounds = [0] + cuts + [len(names)]
        return [names[a:b] for a, b in zip(bounds, bounds[1:])]
    for name, size in zip(names, sizes):
        if current and acc + size > max_bytes:
            groups.append(current)
            current, acc = [], 0
        current.append(name)
        acc += size
    return groups + [current] if current else groups


def write_sharded(folder, stem, entries, shards=None, max_bytes=None, progress=None):
    """<stem>-0000k-of-0000n.safetensors files and <stem>.safetensors.index.json
    ({"metadata": {"total_size"}, "weight_map"}), as transformers
    (stem "model") and diffusers (stem "diffusion_pytorch_model") name them."""
    groups = plan_shards(entries, shards, max_bytes)
    weight_map, total = {}, 0
    for k, group in enumerate(groups):
        file = f"{stem}-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        total += write_safetensors(os.path.join(folder, file), {n: entries[n] for n in group}, progress)
        weight_map.update({n: file for n in group})
    with open(os.path.join(folder, f"{stem}.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")
    return total


def read_safetensors(path):
    """name -> numpy array (BF16 widened to float32)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "BF16":
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
        else:
            arr = np.frombuffer(raw, NUMPY[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def read_folder(folder, stem):
    """All tensors of <stem>.safetensors or of its shards (through the index)."""
    index = os.path.join(folder, f"{stem}.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(folder, f"{stem}.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for file in files:
        out.update(read_safetensors(os.path.join(folder, file)))
    return out
