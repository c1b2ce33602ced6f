"""Bad input from a peer, sent by an independent client (Python grpcio + a Python encoder of
the payload format): each push gets its documented status, is counted, and leaves the round
and the other workers untouched; the server keeps serving."""
import re
import struct
import unittest

import grpc
import numpy as np
import xxhash

import muloco.v1.muloco_pb2 as pb
from harness import TINY, ClusterTest, health_check

MODEL_SEED = 0x6D756C6F636F
BODY_SEED = 0x626F6479


def payload(values, version=2):
    """One dense fp32 segment, written from the format documented in common/codec.h."""
    data = np.asarray(values, dtype="<f4").tobytes()
    n = len(values)
    body = struct.pack("<BBHIIIQQ", 1, 32, 0, 0, 0, 1, n, len(data)) + data
    return b"MLCP" + struct.pack("<BBHQQQ", version, 0, 1, n, len(body),
                                 xxhash.xxh64_intdigest(body, seed=BODY_SEED)) + body


class Client:
    def __init__(self, address):
        self.ch = grpc.insecure_channel(address)

        def method(kind, name, resp):
            return getattr(self.ch, kind)(f"/muloco.v1.Muloco/{name}", request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=resp.FromString)
        self.join = method("unary_unary", "Join", pb.JoinResponse)
        self.fetch = method("unary_stream", "FetchModel", pb.ModelChunk)
        self.push_stream = method("stream_unary", "PushUpdate", pb.PushReply)
        self.await_round = method("unary_stream", "AwaitRound", pb.RoundChunk)

    def push(self, worker, rnd, data, total=None, chunk=4096):
        total = len(data) if total is None else total
        chunks = [pb.UpdateChunk(worker_id=worker, round=rnd, total_bytes=total, data=data[i:i + chunk])
                  for i in range(0, max(1, len(data)), chunk)]
        return self.push_stream(iter(chunks), timeout=10)

    def code_of_push(self, *args, **kw):
        try:
            self.push(*args, **kw)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()


class BadInput(ClusterTest):
    def test_rejections_leave_the_round_untouched(self):
        server, addr = self.start_server(*TINY, "--downlink_codec=dense-fp32", "--rounds=2", "--inner_steps=4", "--linger_s=5",
                                         "--min_quorum=2")
        c = Client(addr)
        me = c.join(pb.JoinRequest(name="probe", protocol_version=1), timeout=10)
        n = me.num_params
        model = b"".join(ch.data for ch in c.fetch(pb.FetchModelRequest(worker_id=me.worker_id), timeout=10))
        self.assertEqual(len(model), 4 * n)
        self.assertEqual(xxhash.xxh64_intdigest(model, seed=MODEL_SEED), me.model_checksum)

        ok = [0.001] * n
        bad = {
            "unknown worker": (c.code_of_push(999, 0, payload(ok)), grpc.StatusCode.NOT_FOUND),
            "future round": (c.code_of_push(me.worker_id, 7, payload(ok)), grpc.StatusCode.FAILED_PRECONDITION),
            "wrong size": (c.code_of_push(me.worker_id, 0, payload(ok[:-1])), grpc.StatusCode.INVALID_ARGUMENT),
            "NaN": (c.code_of_push(me.worker_id, 0, payload([float("nan")] + ok[1:])), grpc.StatusCode.INVALID_ARGUMENT),
            "inf": (c.code_of_push(me.worker_id, 0, payload(ok[:-1] + [float("inf")])), grpc.StatusCode.INVALID_ARGUMENT),
            "bad version": (c.code_of_push(me.worker_id, 0, payload(ok, version=9)), grpc.StatusCode.INVALID_ARGUMENT),
            "garbage": (c.code_of_push(me.worker_id, 0, b"\x00" * 100), grpc.StatusCode.INVALID_ARGUMENT),
            "huge declared size": (c.code_of_push(me.worker_id, 0, payload(ok), total=1 << 40), grpc.StatusCode.INVALID_ARGUMENT),
            "truncated stream": (c.code_of_push(me.worker_id, 0, payload(ok)[:-10], total=len(payload(ok))),
                                 grpc.StatusCode.INVALID_ARGUMENT),
        }
        for what, (got, want) in bad.items():
            self.assertEqual(got, want, what)
        try:
            c.join(pb.JoinRequest(name="old", protocol_version=0), timeout=10)
            self.fail("protocol version 0 accepted")
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertTrue(health_check(addr))

        # min_quorum 2 holds the round open after our good push; a real worker joins and
        # closes it: exactly the two good pushes count.
        self.assertEqual(c.code_of_push(me.worker_id, 0, payload(ok)), grpc.StatusCode.OK)
        self.assertEqual(c.code_of_push(me.worker_id, 0, payload(ok)), grpc.StatusCode.ALREADY_EXISTS)
        worker = self.start_worker(addr, "--name=real", name="real")
        update = list(c.await_round(pb.AwaitRoundRequest(worker_id=me.worker_id, round=0), timeout=60))
        self.assertEqual(update[0].contributors, 2)
        # The downlink applied to the fetched model reproduces the server's checksum.
        down = b"".join(ch.data for ch in update)
        segments = struct.unpack_from("<H", down, 6)[0]  # all dense fp32: data follows the table
        params = np.frombuffer(model, dtype="<f4") + np.frombuffer(down[32 + 32 * segments:], dtype="<f4")
        self.assertEqual(xxhash.xxh64_intdigest(params.astype("<f4").tobytes(), seed=MODEL_SEED), update[0].model_checksum)
        self.assertEqual(c.code_of_push(me.worker_id, 0, payload(ok)), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(c.code_of_push(me.worker_id, 1, payload(ok)), grpc.StatusCode.OK)
        c.ch.unary_unary("/muloco.v1.Muloco/Leave", request_serializer=lambda m: m.SerializeToString(),
                         response_deserializer=pb.LeaveReply.FromString)(pb.LeaveRequest(worker_id=me.worker_id))
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        server.wait(timeout=60)
        m = re.search(r"rejected: (\d+) unknown worker, (\d+) wrong round, (\d+) duplicate, (\d+) bad payload",
                      server.text())
        self.assertEqual(tuple(map(int, m.groups())), (1, 2, 1, 7), server.text())


if __name__ == "__main__":
    unittest.main()
