"""Shaped-link smoke test (deploy/wan): a server and two workers in their own network
namespaces, each worker behind a veth link shaped with tbf both ways (deploy/wan/netns.sh), at
rates at which the test model's dense fetch takes about 6 s and each dense push about 8 s (an
asymmetric link: the uplink is the slower), at least four times
the workers' --stall_timeout_s (and three times the server's --idle_timeout_s and
--max_await_s). The run still finishes, because deadlines follow progress, not wall time; the
replicas agree bit for bit; and the measured transfer times match the shaped rate. Needs root
(ip netns, tc); skipped otherwise. test_slow_link.py does the same through a user-space proxy."""
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import unittest
from datetime import datetime

from harness import PLAIN_SERVER, PLAIN_WORKER, SERVER_BIN, TINY, WORKER_BIN, ClusterTest, Proc

NETNS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../deploy/wan/netns.sh"))
RATE_MBIT = 0.16          # 20 kB/s down per link: the tiny model's 120 kB takes about 6 s
RATE = RATE_MBIT * 1e6 / 8
UP_MBIT = 0.12            # 15 kB/s up: 8 s
UP_RATE = UP_MBIT * 1e6 / 8
STALL_S = 1.5             # the workers' --stall_timeout_s
WORKERS = 2
RUN = [*TINY, "--uplink_codec=dense-fp32", "--downlink_codec=dense-fp32", "--rounds=2", "--inner_steps=2",
       "--eval_every=0", "--chunk_bytes=8192", "--linger_s=30", "--idle_timeout_s=2", "--max_await_s=2"]
WORKER = [f"--stall_timeout_s={STALL_S}", "--chunk_bytes=8192", "--heartbeat_s=1",
          "--init_from_seed=false"]  # the initial model crosses the shaped link
METRICS_PORT = 9090       # on the server namespace's loopback


def stamp(line):
    return datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def netns(*args):
    return subprocess.run([NETNS, *map(str, args)], capture_output=True, text=True, timeout=60)


def why_no_netns():
    """None when this machine can make namespaces and tbf qdiscs; otherwise why not."""
    if os.geteuid() != 0:
        return "needs root for ip netns and tc (run as root to test a tbf-shaped link)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    probe = f"mwan-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add fails here: {r.stderr.strip()}"
    try:
        r = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "tbf",
                            "rate", "1mbit", "burst", "4096", "limit", "65536"], capture_output=True, text=True)
        if r.returncode != 0:
            return f"the tbf qdisc is unavailable: {r.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sweep_dead_runs():
    """Removes the namespaces of earlier runs of this test whose process is gone (killed by a
    ctest timeout, say: no cleanup ran)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for pid in sorted({int(m[1]) for m in map(re.compile(r"^mwan-(?:s|w\d+)-it(\d+)$").match, names) if m}):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            netns("down", f"it{pid}")
        except PermissionError:
            pass


class MetricsPoller(threading.Thread):
    """Keeps the server's latest /metrics, read inside its namespace (the server exits soon
    after the last worker leaves, so the last reading is taken while it runs)."""

    def __init__(self, ns, proc):
        super().__init__(daemon=True)
        url = f"http://127.0.0.1:{METRICS_PORT}/metrics"
        get = (["curl", "-s", "-m", "2", url] if shutil.which("curl") else
               [sys.executable, "-c", f"import urllib.request as u; print(u.urlopen('{url}', timeout=2).read().decode())"])
        self.cmd, self.proc, self.text = ["ip", "netns", "exec", ns, *get], proc, ""

    def run(self):
        while self.proc.p.poll() is None:
            r = subprocess.run(self.cmd, capture_output=True, text=True)
            if r.returncode == 0 and "muloco_push_duration_seconds_count" in r.stdout:
                self.text = r.stdout
            time.sleep(0.3)

    def value(self, name):
        m = re.search(rf"^{name} ([\d.e+-]+)$", self.text, re.M)
        return float(m[1]) if m else None


class WanLink(ClusterTest):
    def setUp(self):
        why = why_no_netns()
        if why:
            self.skipTest(why)
        super().setUp()
        self.tag = f"it{os.getpid()}"
        sweep_dead_runs()
        netns("down", self.tag)  # a namespace left by an earlier process of this pid
        self.addCleanup(self._down)  # runs after tearDown has killed the processes
        r = netns("up", self.tag, WORKERS, RATE_MBIT, UP_MBIT)
        self.assertEqual(r.returncode, 0, f"netns.sh up failed:\n{r.stdout}\n{r.stderr}")
        # Each direction of each link has its own rate.
        self.assertEqual(re.findall(r"(down|up): +qdisc tbf \S+ root refcnt \d+ rate (\d+)Kbit", r.stdout),
                         [("down", "160"), ("up", "120")] * WORKERS, r.stdout)

    def _down(self):
        r = netns("down", self.tag)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        self.assertNotIn(f"-{self.tag}", left, f"namespaces left behind: {left}\n{r.stderr}")

    def test_transfers_longer_than_every_timeout_finish_over_tbf(self):
        t0 = time.time()
        sns = f"mwan-s-{self.tag}"
        port_file = self.path("server.port")
        server = Proc(["ip", "netns", "exec", sns, SERVER_BIN, "--listen=0.0.0.0:0", f"--port_file={port_file}",
                       f"--metrics_listen=127.0.0.1:{METRICS_PORT}", f"--save_final={self.path('server.bin')}",
                       *PLAIN_SERVER, *RUN], self.path("server.log"))
        self.procs.append(server)
        self.wait_for(server, r"serving on port", 30)
        with open(port_file) as f:
            port = f.read().strip()
        poller = MetricsPoller(sns, server)
        poller.start()
        workers = []
        for i in range(WORKERS):
            address = netns("addr", self.tag, f"w{i}").stdout.strip()
            w = Proc(["ip", "netns", "exec", f"mwan-w{i}-{self.tag}", WORKER_BIN, f"--server={address}:{port}",
                      *PLAIN_WORKER, *WORKER, f"--name=w{i}", f"--save_final={self.path(f'w{i}.bin')}"],
                     self.path(f"w{i}.log"))
            self.procs.append(w)
            workers.append(w)
        for w in workers:
            self.assertEqual(w.wait(timeout=90), 0, w.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        poller.join(timeout=5)

        # Replicas agree: every worker's final checksum and parameters are the server's.
        server_sum = re.search(r"final checksum ([0-9a-f]+)", server.text())[1]
        params = self.read_bytes("server.bin")
        dense = len(params)
        self.assertGreater(dense, 100_000)
        for i, w in enumerate(workers):
            text = w.text()
            # One uninterrupted stream each: no transfer stalled, was cut (TCP_USER_TIMEOUT) or resumed.
            self.assertNotIn("no progress", text)
            self.assertNotIn("resuming at parameter", text)
            self.assertEqual(re.search(r"final: .* checksum ([0-9a-f]+)", text)[1], server_sum, f"w{i}")
            self.assertEqual(self.read_bytes(f"w{i}.bin"), params, f"worker {i} differs from the server")
            self.assertEqual(len(re.findall(r"round \d+: train_loss .* checksum [0-9a-f]+ ok", text)), 2, text)

        # Transfer times follow the shaped rate: the fetch of the dense model, and the pushes
        # (timed by the server from the call's start to the aggregation).
        ideal, ideal_up = dense / RATE, dense / UP_RATE
        for i, w in enumerate(workers):
            lines = w.text().splitlines()
            joined = stamp(next(l for l in lines if " joined " in l))
            fetched = stamp(next(l for l in lines if "fetched model" in l))
            first = stamp(next(l for l in lines if re.search(r"round 0: train_loss", l)))
            print(f"w{i}: fetch {fetched - joined:.1f} s, round 0 (train, push, wait, update) {first - fetched:.1f} s; "
                  f"{dense} bytes at {RATE / 1e3:.0f} kB/s down: {ideal:.1f} s, at {UP_RATE / 1e3:.0f} kB/s up: {ideal_up:.1f} s")
            self.assertGreater(fetched - joined, 0.5 * ideal)
            self.assertGreater(fetched - joined, 3 * STALL_S)
            self.assertLess(fetched - joined, 3 * ideal)
            self.assertGreater(first - fetched, 0.5 * (ideal + ideal_up))  # the push and the dense update
        pushes = poller.value("muloco_push_duration_seconds_count")
        push_s = poller.value("muloco_push_duration_seconds_sum")
        self.assertEqual(pushes, 2 * WORKERS, f"server metrics:\n{poller.text[-3000:]}")
        print(f"pushes: {pushes:.0f}, {push_s / pushes:.1f} s each (ideal {ideal_up:.1f} s); test {time.time() - t0:.1f} s")
        self.assertGreater(push_s / pushes, 0.5 * ideal_up)
        self.assertGreater(push_s / pushes, 3 * STALL_S)
        self.assertLess(push_s / pushes, 3 * ideal_up)


if __name__ == "__main__":
    unittest.main()
