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
from peer import MODEL_SEED, Peer, code_of, dense_payload, gpt_shapes

SHAPES = gpt_shapes()  # TINY's model


def payload(values, version=2):
    return dense_payload(values, SHAPES, version)

class BadInput(ClusterTest):
    def test_rejections_leave_the_round_untouched(self):
        server, addr = self.start_server(*TINY, "--uplink_codec=dense-fp32", "--downlink_codec=dense-fp32",
                                         "--max_push_attempts_per_round=100", "--rounds=2", "--inner_steps=4", "--linger_s=5",
                                         "--min_quorum=2")
        c = Peer(addr)
        me = c.join(name="probe")
        n = me.num_params
        self.assertEqual(n, sum(numel for _, numel, _ in SHAPES))
        model = c.fetch()
        self.assertEqual(len(model), 4 * n)
        self.assertEqual(xxhash.xxh64_intdigest(model, seed=MODEL_SEED), me.model_checksum)

        ok = [0.001] * n
        bad = {
            "unknown worker": (code_of(c.push, 0, payload(ok), worker=999), grpc.StatusCode.NOT_FOUND),
            "future round": (code_of(c.push, 7, payload(ok)), grpc.StatusCode.FAILED_PRECONDITION),
            "wrong size": (code_of(c.push, 0, dense_payload(ok[:-1], SHAPES[:-1] + [(256, 256 * 32 - 1, False)])),
                           grpc.StatusCode.INVALID_ARGUMENT),
            "NaN": (code_of(c.push, 0, payload([float("nan")] + ok[1:])), grpc.StatusCode.INVALID_ARGUMENT),
            "inf": (code_of(c.push, 0, payload(ok[:-1] + [float("inf")])), grpc.StatusCode.INVALID_ARGUMENT),
            "FLT_MAX": (code_of(c.push, 0, payload([3.4028235e38] + ok[1:])), grpc.StatusCode.INVALID_ARGUMENT),
            "bad version": (code_of(c.push, 0, payload(ok, version=9)), grpc.StatusCode.INVALID_ARGUMENT),
            "garbage": (code_of(c.push, 0, b"\x00" * 100), grpc.StatusCode.INVALID_ARGUMENT),
            "huge declared size": (code_of(c.push, 0, payload(ok), total=1 << 40), grpc.StatusCode.INVALID_ARGUMENT),
            "truncated stream": (code_of(c.push, 0, payload(ok)[:-10], total=len(payload(ok))),
                                 grpc.StatusCode.INVALID_ARGUMENT),
            "not the run's codec": (code_of(c.push, 0, dense_payload(ok, [(1, n, False)])),
                                    grpc.StatusCode.INVALID_ARGUMENT),
        }
        for what, (got, want) in bad.items():
            self.assertEqual(got, want, what)
        self.assertEqual(code_of(Peer(addr).join, name="old", version=0), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertTrue(health_check(addr))

        # min_quorum 2 holds the round open after our good push; a real worker joins and
        # closes it: exactly the two good pushes count.
        self.assertEqual(code_of(c.push, 0, payload(ok)), grpc.StatusCode.OK)
        self.assertEqual(code_of(c.push, 0, payload(ok)), grpc.StatusCode.ALREADY_EXISTS)
        worker = self.start_worker(addr, "--name=real", name="real")
        update = c.await_round(0)
        self.assertEqual(update[0].contributors, 2)
        # The downlink applied to the fetched model reproduces the server's checksum.
        down = b"".join(ch.data for ch in update)
        segments = struct.unpack_from("<H", down, 6)[0]  # all dense fp32: data follows the table
        params = np.frombuffer(model, dtype="<f4") + np.frombuffer(down[32 + 32 * segments:], dtype="<f4")
        self.assertEqual(xxhash.xxh64_intdigest(params.astype("<f4").tobytes(), seed=MODEL_SEED), update[0].model_checksum)
        # Round 0 closed with our push in it: a retry (its reply lost) hears ALREADY_EXISTS, so
        # the worker keeps its error feedback committed.
        self.assertEqual(code_of(c.push, 0, payload(ok)), grpc.StatusCode.ALREADY_EXISTS)
        self.assertEqual(code_of(c.push, 1, payload(ok)), grpc.StatusCode.OK)
        c.leave()
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        server.wait(timeout=60)
        m = re.search(r"rejected: (\d+) unknown worker, (\d+) wrong round, (\d+) duplicate, (\d+) bad payload",
                      server.text())
        self.assertEqual(tuple(map(int, m.groups())), (0, 1, 2, 9), server.text())

    def test_worker_never_pushes_a_non_finite_update(self):
        # Two bad rounds (injected NaNs): the worker resets its optimizer, resyncs and goes on
        # to finish the run; nothing non-finite ever reaches the server.
        server, addr = self.start_server(*TINY, "--rounds=4", "--inner_steps=2", "--linger_s=5")
        worker = self.start_worker(addr, "--name=flaky", "--fault_nonfinite_rounds=2", name="flaky")
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        self.assertEqual(len(re.findall(r"non-finite or out of range; resetting", worker.text())), 2, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        self.assertIn("0 bad payload", server.text())
        self.assertEqual(len(re.findall(r"round \d+ closed", server.text())), 4)
        # Always bad: it gives up after three rounds in a row, with a clear message.
        server, addr = self.start_server(*TINY, "--rounds=4", "--inner_steps=2", "--linger_s=1", name="server2")
        worker = self.start_worker(addr, "--name=broken", "--fault_nonfinite_rounds=100", name="broken")
        self.assertEqual(worker.wait(timeout=120), 1, worker.text())
        self.assertIn("lower the learning rate", worker.text())
        self.assertNotRegex(server.text(), r"round \d+ closed")

if __name__ == "__main__":
    unittest.main()
