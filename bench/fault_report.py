#!/usr/bin/python3
"""Recovery times over real processes on loopback (numbers for bench/README.md):

1. server crash -> next closed round: demo model, two workers, kill -9 of the server after
   round 3, restart from its checkpoint on the same port.
2. a joiner's Join + FetchModel, and the push of one round's payload, for the demo model
   and for a ~100M-parameter model (d_model 1024, 8 layers). The 100M joiner is simulated by
   an independent Python client (training it here would take hours): it joins, fetches the
   whole model, and pushes one dense fp32 pseudo-gradient; a 2-bit payload is 14x smaller.

Usage: bench/fault_report.py BUILD_DIR
"""
import os
import struct
import sys
import tempfile
import time

import numpy as np
import xxhash

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../tests/integration"))
os.environ.setdefault("MULOCO_BUILD", sys.argv[1] if len(sys.argv) > 1 else "build")
sys.path.insert(0, os.path.join(os.environ["MULOCO_BUILD"], "python"))

import harness  # noqa: E402
import muloco.v1.muloco_pb2 as pb  # noqa: E402
from test_bad_input import Client  # noqa: E402


class Report(harness.ClusterTest):
    def runTest(self):
        pass


def dense_payload(n):
    data = np.zeros(n, dtype="<f4").tobytes()
    body = struct.pack("<BBHIIIQQ", 1, 32, 0, 0, 0, 1, n, len(data)) + data
    return b"MLCP" + struct.pack("<BBHQQQ", 2, 0, 1, n, len(body), xxhash.xxh64_intdigest(body, seed=0x626F6479)) + body


def crash_recovery(t):
    flags = [f"--checkpoint_dir={t.path('ckpt')}", "--rounds=8"]
    server, addr = t.start_server(*flags, name="crash1")
    workers = [t.start_worker(addr, name=f"cw{i}") for i in range(2)]
    t.wait_for(server, r"round 3 closed", timeout=300)
    server.kill()
    crashed = time.time()
    server2, _ = t.start_server(*flags, f"--listen={addr}", name="crash2")
    resumed = int(t.wait_for(server2, r"at round (\d+)", timeout=60).group(1))
    t.wait_for(server2, rf"round {resumed} closed", timeout=300)
    took = time.time() - crashed
    for w in workers:
        w.wait(timeout=600)
    server2.wait(timeout=60)
    return took


def joiner(t, model_flags, tag):
    server, addr = t.start_server(*model_flags, "--rounds=1", "--uplink_codec=dense-fp32", name=tag)
    c = Client(addr)
    t0 = time.time()
    me = c.join(pb.JoinRequest(name="probe", protocol_version=1), timeout=60)
    got = sum(len(ch.data) for ch in c.fetch(pb.FetchModelRequest(worker_id=me.worker_id), timeout=600))
    fetched = time.time() - t0
    payload = dense_payload(me.num_params)
    t1 = time.time()
    c.push(me.worker_id, 0, payload, chunk=1 << 20)
    pushed = time.time() - t1
    server.kill()
    return me.num_params, got, fetched, len(payload), pushed


def main():
    t = Report()
    t.setUp()
    try:
        print(f"server crash -> next closed round (demo model, 2 workers): {crash_recovery(t):.2f} s")
        demo = joiner(t, [], "demo")
        big = joiner(t, ["--d_model=1024", "--n_layer=8", "--n_head=16"], "big")
        for name, (n, got, fetched, size, pushed) in (("demo", demo), ("~100M", big)):
            print(f"{name}: {n} parameters; join + fetch {got / 1e6:.1f} MB in {fetched:.2f} s "
                  f"({got / fetched / 1e6:.0f} MB/s); push of a dense fp32 round {size / 1e6:.1f} MB in {pushed:.2f} s")
    finally:
        t.tearDown()


if __name__ == "__main__":
    main()
