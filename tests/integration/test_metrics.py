"""Prometheus metrics, read by a real Prometheus: the server and two workers serve /metrics
(--metrics_listen=127.0.0.1:0), a `prometheus` process scrapes them every second, and what
its query API returns agrees exactly with the processes' own logs. Also: the shipped
deploy/prometheus.yml passes promtool, and a metrics port that is taken fails the start
with a clear message."""
import json
import os
import re
import shutil
import socket
import subprocess
import time
import unittest
import urllib.parse
import urllib.request

from harness import TINY, ClusterTest, Proc, SERVER_BIN

DEPLOY_CONFIG = os.path.join(os.path.dirname(__file__), "../../deploy/prometheus.yml")
RUN = [*TINY, "--rounds=1000", "--inner_steps=4", "--min_quorum=2", "--uplink_codec=linear:bits=2,chunk=256",
       "--downlink_codec=linear:bits=2,chunk=256", "--eval_every=0"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


class Metrics(ClusterTest):
    def test_promtool_accepts_the_deploy_config(self):
        r = subprocess.run([shutil.which("promtool"), "check", "config", DEPLOY_CONFIG], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_taken_metrics_port_fails_the_start(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            proc = Proc([SERVER_BIN, "--listen=127.0.0.1:0", "--insecure", "--open_join", f"--metrics_listen=127.0.0.1:{s.getsockname()[1]}"],
                        self.path("taken.log"))
            self.procs.append(proc)
            self.assertEqual(proc.wait(timeout=30), 1)
        self.assertIn("cannot serve metrics on 127.0.0.1:", proc.text())

    def start_prometheus(self, targets):
        port = free_port()
        jobs = "".join(f"""
  - job_name: {job}
    static_configs:
      - targets: [{", ".join(f'"127.0.0.1:{p}"' for p in ports)}]
""" for job, ports in targets.items())
        config = self.path("prometheus.yml")
        with open(config, "w") as f:
            f.write(f"global:\n  scrape_interval: 1s\nscrape_configs:{jobs}")
        proc = Proc([shutil.which("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={self.path('tsdb')}",
                     f"--web.listen-address=127.0.0.1:{port}"], self.path("prometheus.log"))
        self.procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            self.assertIsNone(proc.p.poll(), proc.text())
            try:
                if http_get(base + "/-/ready")[0] == 200:
                    return base
            except OSError:
                pass
            time.sleep(0.2)
        self.fail("prometheus never became ready:\n" + proc.text())

    def query(self, base, promql):
        """{frozenset(labels): value} of an instant query."""
        _, body = http_get(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}")
        result = json.loads(body)
        self.assertEqual(result["status"], "success", body)
        return {frozenset(r["metric"].items()): float(r["value"][1]) for r in result["data"]["result"]}

    def wait_query(self, base, promql, ok, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            values = self.query(base, promql)
            if ok(values):
                return values
            time.sleep(0.5)
        self.fail(f"{promql}: never satisfied; last {values}")

    def test_prometheus_scrapes_server_and_workers(self):
        server, addr = self.start_server(*RUN, "--metrics_listen=127.0.0.1:0")
        server_port = int(self.wait_for(server, r"metrics on port (\d+)", 30).group(1))
        workers = [self.start_worker(addr, "--metrics_listen=127.0.0.1:0", f"--name=w{i}", name=f"w{i}")
                   for i in range(2)]
        worker_ports = [int(self.wait_for(w, r"metrics on port (\d+)", 60).group(1)) for w in workers]

        # The exposition text itself, fetched directly.
        status, text = http_get(f"http://127.0.0.1:{server_port}/metrics")
        self.assertEqual(status, 200)
        self.assertIn("# TYPE muloco_rounds_closed_total counter", text)
        self.assertIn('muloco_rejected_pushes_total{reason="bad_payload"} 0', text)

        # Each worker's own endpoint serves its counters (for workers one can reach)...
        for port in worker_ports:
            status, text = http_get(f"http://127.0.0.1:{port}/metrics")
            self.assertEqual(status, 200)
            self.assertIn("# TYPE muloco_worker_rounds_total counter", text)
            self.assertRegex(text, r'muloco_build_info\{version="[^"]+"\} 1')
        # ...but Prometheus scrapes only the server: workers behind NAT report through their
        # heartbeats, and the server exports their series labelled with their names.
        base = self.start_prometheus({"muloco-server": [server_port]})
        rounds = self.wait_query(base, "muloco_worker_rounds_total >= 3", lambda v: len(v) == 2)
        self.assertEqual(sorted(dict(k)["worker"] for k in rounds), ["w0@open", "w1@open"])
        for port in worker_ports:  # three rounds of H = 4 inner steps each, timed one by one
            text = http_get(f"http://127.0.0.1:{port}/metrics")[1]
            self.assertIn("# TYPE muloco_worker_inner_step_duration_seconds histogram", text)
            steps = int(re.search(r"^muloco_worker_inner_step_duration_seconds_count (\d+)", text, re.M).group(1))
            self.assertGreaterEqual(steps, 12)
        ups = self.query(base, "up")
        self.assertEqual(sorted(ups.values()), [1.0], ups)
        for name in ("muloco_worker_tokens_per_second", "muloco_worker_inner_step_seconds",
                     "muloco_worker_ef_residual_norm"):
            values = self.query(base, name)
            self.assertEqual(len(values), 2, name)
            self.assertTrue(all(v > 0 for v in values.values()), (name, values))
        stale = self.query(base, "muloco_worker_staleness_rounds")
        self.assertEqual(len(stale), 2)
        self.assertTrue(all(v <= 1 for v in stale.values()), stale)  # both keep up
        closed = self.query(base, "muloco_round_duration_seconds_count")
        self.assertGreaterEqual(list(closed.values())[0], 3)
        self.assertEqual(list(self.query(base, "histogram_quantile(0.5, muloco_round_duration_seconds_bucket) > 0")
                              .values()).__len__(), 1)
        self.assertEqual(len(self.query(base, "muloco_build_info == 1")), 1)

        # One push's payload size and its ratio to dense fp32, as the worker logs them.
        logged = re.search(r"up (\d+) bytes \(([\d.]+)x smaller than dense fp32, ([\d.]+) bits/param\)",
                           workers[0].text())
        self.assertAlmostEqual(float(logged.group(3)), 8 * int(logged.group(1)) / 29888, delta=0.001)  # TINY's size
        payload, ratio = int(logged.group(1)), float(logged.group(2))
        # Every push has that size; each scrape reads one consistent snapshot.
        for promql in ["muloco_uplink_bytes_total / muloco_pushes_total",
                       "muloco_worker_uplink_bytes_total / muloco_worker_rounds_total"]:
            values = self.query(base, promql)
            self.assertTrue(values, promql)
            for v in values.values():
                self.assertEqual(v, payload, promql)
        dense = list(self.query(base, "muloco_dense_payload_bytes").values())
        self.assertEqual(len(dense), 1)
        self.assertAlmostEqual(dense[0] / payload, ratio, delta=0.05)
        self.assertEqual(list(self.query(base, "muloco_live_workers").values()), [2.0])
        # A round's pushes are held until its close (round_engine.h): two workers, two payloads.
        held = list(self.query(base, "muloco_held_payload_bytes_peak").values())
        self.assertEqual(held, [2 * payload])
        self.assertEqual(list(self.query(base, "muloco_participants").values()), [2.0])
        # Both workers' updates counted in full in the last round (robust screening, server/screen.h).
        weights = self.query(base, "muloco_screen_weight")
        self.assertEqual(len(weights), 2)
        for v in weights.values():
            self.assertEqual(v, 1.0)
        rejected = self.query(base, "muloco_rejected_pushes_total")
        self.assertEqual(sorted(dict(k)["reason"] for k in rejected),
                         ["bad_payload", "duplicate", "round_full", "unknown_worker", "wrong_round"])
        self.assertEqual(set(rejected.values()), {0.0})
        fetches = self.query(base, "muloco_model_fetches_total")
        self.assertEqual(list(fetches.values()), [0.0])  # the workers built the initial model from its seed
        losses = self.query(base, "muloco_worker_train_loss")
        self.assertEqual(len(losses), 2)
        for v in losses.values():
            self.assertTrue(0 < v < 6, losses)


if __name__ == "__main__":
    unittest.main()
