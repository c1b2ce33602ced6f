"""The safetensors format written and read from its definition (8-byte little-endian header
length, JSON header, raw data), without the safetensors library: tests use it to make a
user's initial model and to read what the server exports."""
import json
import struct

import numpy as np
import torch

DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def write_safetensors(path, tensors, metadata=None):
    """`tensors`: [(name, numpy array)] written in that order; the dtype follows the array
    (float32, float64 or float16)."""
    header, datas, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, array in tensors:
        kind = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("float16"): "F16"}[array.dtype]
        raw = np.ascontiguousarray(array, dtype=DTYPES[kind]).tobytes()
        header[name] = {"dtype": kind, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        datas.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(datas))


def read_safetensors(path):
    """{name: tensor}, metadata, the header, the raw data."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    assert n % 8 == 0, "data must start 8-byte aligned"
    header = json.loads(data[8:8 + n])
    base = 8 + n
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", info
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data, dtype="<f4", count=(end - begin) // 4, offset=base + begin)
        tensors[name] = torch.tensor(arr.reshape(info["shape"]))
    return tensors, meta, header, data[base:]
