"""The safetensors format (8-byte little-endian header length, JSON header, raw data) written
and read from its definition, without the safetensors library: muloco.save_initial writes a
user's initial model with it, and it reads what muloco-server --export writes."""
import json
import struct

import numpy as np

_KINDS = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("float16"): "F16"}
_NUMPY = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def write(path, tensors, metadata=None):
    """`tensors`: [(name, numpy array)], written in that order; each array's dtype (float32,
    float64 or float16) is kept. `metadata`: {str: str}."""
    header, datas, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, array in tensors:
        array = np.asarray(array)
        kind = _KINDS[array.dtype]
        raw = np.ascontiguousarray(array, dtype=_NUMPY[kind]).tobytes()
        header[name] = {"dtype": kind, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        datas.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(datas))


def read(path):
    """({name: numpy array}, metadata), the tensors in the file's data order."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        dtype = np.dtype(_NUMPY[info["dtype"]])
        arr = np.frombuffer(data, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=8 + n + begin)
        tensors[name] = arr.reshape(info["shape"])
    return tensors, meta
