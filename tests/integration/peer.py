"""An independent muloco client in Python (grpcio + the documented formats): the session
metadata of proto/muloco/v1/muloco.proto, the GPT parameter layout of
common/model_layout.cc and payloads written from the byte layout in codec/codec.h. Tests use
it as an honest probe and as a hostile peer."""
import os
import struct
import sys

import grpc
import numpy as np
import xxhash

import muloco.v1.muloco_pb2 as pb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from gpt_layout import tensor_shapes as gpt_shapes  # noqa: E402  (TINY's model by default)

MODEL_SEED = 0x6D756C6F636F
BODY_SEED = 0x626F6479
DENSE, LLOYD = 1, 7


def _frame(entries, datas, version=2):
    body = b"".join(entries) + b"".join(datas)
    n = sum(struct.unpack_from("<Q", e, 16)[0] for e in entries)
    return b"MLCP" + struct.pack("<BBHQQQ", version, 0, len(entries), n, len(body),
                                 xxhash.xxh64_intdigest(body, seed=BODY_SEED)) + body


def dense_payload(values, shapes, version=2):
    """Dense fp32, one segment per tensor (the run codec "dense-fp32")."""
    values = np.asarray(values, dtype="<f4")
    entries, datas, off = [], [], 0
    for rows, numel, _ in shapes:
        data = values[off:off + numel].tobytes()
        off += numel
        entries.append(struct.pack("<BBHIIIQQ", DENSE, 32, 0, 0, 0, rows, numel, len(data)))
        datas.append(data)
    return _frame(entries, datas, version)


def lloyd_payload(shapes, table, chunk=4096, bits=2, vector_values=0.0):
    """The default preset's codec "lloyd:bits=2,chunk=4096" (vectors dense): every chunk decodes through
    `table` (2^bits floats) with all codes 0, so each matrix element decodes to table[0];
    vectors are dense fp32 `vector_values`."""
    entries, datas = [], []
    for rows, numel, vector in shapes:
        if vector:
            data = np.full(numel, vector_values, dtype="<f4").tobytes()
            entries.append(struct.pack("<BBHIIIQQ", DENSE, 32, 0, 0, 0, rows, numel, len(data)))
        else:
            nc = -(-numel // chunk)
            tables = np.tile(np.asarray(table, dtype="<f4"), nc).tobytes()
            data = tables + bytes((numel * bits + 7) // 8)
            entries.append(struct.pack("<BBHIIIQQ", LLOYD, bits, 0, chunk, 0, rows, numel, len(data)))
        datas.append(data)
    return _frame(entries, datas)


class Peer:
    """One client: Join, then every call with the session metadata (or `session` overridden)."""

    def __init__(self, address, credentials=None, options=()):
        self.ch = grpc.secure_channel(address, credentials, options=options) if credentials else grpc.insecure_channel(address)

        def method(kind, name, resp):
            return getattr(self.ch, kind)(f"/muloco.v1.Muloco/{name}", request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=resp.FromString)
        self._join = method("unary_unary", "Join", pb.JoinResponse)
        self._fetch = method("unary_stream", "FetchModel", pb.ModelChunk)
        self._push = method("stream_unary", "PushUpdate", pb.PushReply)
        self._await = method("unary_stream", "AwaitRound", pb.RoundChunk)
        self._heartbeat = method("unary_unary", "Heartbeat", pb.HeartbeatReply)
        self._leave = method("unary_unary", "Leave", pb.LeaveReply)
        self._progress = method("unary_unary", "PushProgress", pb.PushProgressReply)
        self.id, self.key = 0, ""

    def close(self):
        self.ch.close()

    def md(self, worker=None, key=None):
        return (("muloco-worker", str(self.id if worker is None else worker)),
                ("muloco-session", self.key if key is None else key))

    def join(self, name="probe", token="", version=1, timeout=10, layout=()):
        """`layout`: [(name, shape)] of this peer's model (none: it builds the run's from the config)."""
        model = pb.ModelLayout(tensors=[pb.TensorSpec(name=n, shape=list(s)) for n, s in layout])
        r = self._join(pb.JoinRequest(name=name, protocol_version=version, token=token, layout=model), timeout=timeout)
        self.id, self.key = r.worker_id, r.session_key
        return r

    def fetch(self, timeout=10, **md):
        return b"".join(c.data for c in self._fetch(pb.FetchModelRequest(worker_id=md.get("worker", self.id)),
                                                    metadata=self.md(**md), timeout=timeout))

    def push(self, rnd, data, total=None, chunk=4096, timeout=10, checksum=None, inner_steps=0, **md):
        """One push; `checksum` defaults to the protocol's: xxh64 of the payload seeded with the round;
        `inner_steps`: the steps it claims to hold (0: the run's H)."""
        total = len(data) if total is None else total
        checksum = xxhash.xxh64_intdigest(data, seed=rnd) if checksum is None else checksum
        chunks = [pb.UpdateChunk(worker_id=md.get("worker", self.id), round=rnd, total_bytes=total, data=data[i:i + chunk],
                                 offset=i, payload_checksum=checksum, inner_steps=inner_steps)
                  for i in range(0, max(1, len(data)), chunk)]
        return self._push(iter(chunks), metadata=self.md(**md), timeout=timeout)

    def await_round(self, rnd, timeout=60, **md):
        return list(self._await(pb.AwaitRoundRequest(worker_id=md.get("worker", self.id), round=rnd),
                                metadata=self.md(**md), timeout=timeout))

    def heartbeat(self, timeout=10, step_seconds=None, **md):
        """`step_seconds`: report that many seconds per inner step (the reply's inner_steps follows)."""
        report = pb.WorkerReport(inner_step_seconds=step_seconds) if step_seconds is not None else None
        return self._heartbeat(pb.HeartbeatRequest(worker_id=md.get("worker", self.id), report=report),
                               metadata=self.md(**md), timeout=timeout)

    def leave(self, timeout=10, **md):
        return self._leave(pb.LeaveRequest(worker_id=md.get("worker", self.id)), metadata=self.md(**md), timeout=timeout)


def code_of(call, *args, **kw):
    """The grpc.StatusCode a call ends with (OK when it returns)."""
    try:
        call(*args, **kw)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()
