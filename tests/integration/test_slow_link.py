"""Slow links must not kill workers: a model fetch and a push over a throttled link take
several times the worker's --stall_timeout_s and still finish, because deadlines follow
progress (chunks moving), not wall time; a link that stops moving is noticed within that
timeout and the fetch resumes once it moves again; a push cut mid-way resumes from the bytes
the server kept, not from its start. The link is a rate-limited TCP proxy on loopback
(test_wan_link.py does the same over network namespaces and tbf)."""
import re
import time
import unittest
from datetime import datetime

from harness import TINY, ClusterTest, Proxy

RATE = 20_000  # bytes per second, each direction
RUN = [*TINY, "--uplink_codec=dense-fp32", "--downlink_codec=dense-fp32", "--rounds=1", "--inner_steps=2",
       "--chunk_bytes=8192", "--linger_s=60", "--eval_every=0"]
WORKER = ["--stall_timeout_s=1.5", "--chunk_bytes=8192", "--heartbeat_s=1",
          "--init_from_seed=false"]  # the initial model crosses the slow link


def stamp(line):
    return datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


class SlowLink(ClusterTest):
    def test_transfers_longer_than_the_stall_timeout_finish(self):
        # --linger_s=3: the final update (~6 s here) is still let finish, since the server's
        # linger counts from the last word of a live worker (it used to count from the final
        # close and cut the transfer: a WAN run with 1-minute transfers failed so).
        server, addr = self.start_server(*RUN, "--linger_s=3")
        proxy = Proxy(int(addr.split(":")[1]), RATE)
        worker = self.start_worker(f"127.0.0.1:{proxy.port}", *WORKER, "--name=slow")
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        text = worker.text()
        self.assertNotIn("no progress", text)
        lines = text.splitlines()
        joined = stamp(next(l for l in lines if " joined " in l))
        fetched = stamp(next(l for l in lines if "fetched model" in l))
        done = stamp(next(l for l in lines if re.search(r"round 0: train_loss", l)))
        # 120 KB each way at 20 KB/s: the fetch alone takes about 6 s, four stall timeouts.
        print(f"slow link: fetch {fetched - joined:.1f} s, push + round + update {done - fetched:.1f} s")
        self.assertGreater(fetched - joined, 4 * 1.5)
        self.assertGreater(done - fetched, 2 * 6 * 0.8)  # push and the dense update, ~6 s each

    def test_a_stopped_link_is_noticed_and_the_fetch_resumes(self):
        server, addr = self.start_server(*RUN)
        proxy = Proxy(int(addr.split(":")[1]), RATE)
        worker = self.start_worker(f"127.0.0.1:{proxy.port}", *WORKER, "--name=stalled")
        self.wait_for(worker, r" joined ", 60)
        proxy.freeze()
        self.wait_for(worker, r"model fetch: no progress for 1\.5 s .*; resuming at parameter", 30)
        proxy.thaw()
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        self.assertIn("fetched model", worker.text())

    def test_a_cut_push_resumes_where_it_stopped(self):
        server, addr = self.start_server(*RUN)
        proxy = Proxy(int(addr.split(":")[1]), RATE)
        worker = self.start_worker(f"127.0.0.1:{proxy.port}", *WORKER, "--name=cutpush")
        self.wait_for(worker, r"fetched model", 60)
        # The dense push (120 KB) is under way once ~40 KB went up: cut the link (the server
        # keeps what arrived), then bring it back.
        deadline = time.time() + 60
        while proxy.upstream_bytes < 40_000 and time.time() < deadline:
            time.sleep(0.05)
        proxy.cut()
        self.wait_for(worker, r"server unavailable", 30)
        proxy.restore()
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        m = re.search(r"push for round 0: resuming at byte (\d+) of (\d+)", worker.text())
        self.assertIsNotNone(m, worker.text())
        resumed, size = int(m.group(1)), int(m.group(2))
        self.assertGreater(resumed, 8192)  # at least a chunk the server had kept
        # What went up: the first try's bytes up to the cut, then the rest, not the payload twice.
        print(f"push resumed at byte {resumed}; {proxy.upstream_bytes} bytes went up in all")
        self.assertLess(proxy.upstream_bytes, size + resumed // 2)

if __name__ == "__main__":
    unittest.main()
