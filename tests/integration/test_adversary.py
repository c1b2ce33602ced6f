"""A volunteer turned hostile: an independent python3-grpcio client holding a valid join
token runs beside two honest workers and, round after round, pushes x1000 updates, FLT_MAX
values, 1e38 decode tables and NaNs, acts as the honest workers' ids, floods leaves and
joins. The server stays up, the honest workers finish with a validation loss within 5% of
the same run without the attacker, and every attack shows in the server's metrics. A
second test floods the server with joins, idle streams, PushProgress calls, an oversized
message and raw TCP connections that never speak, and checks that its memory, threads and
file descriptors stay bounded, that an honest worker can still join, and that the honest run
finishes."""
import collections
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import grpc

import muloco.v1.muloco_pb2 as pb
from harness import BUILD, TINY, ClusterTest
from peer import Peer, code_of, gpt_shapes, lloyd_payload

HONEST = ["honest-token-a-0123456789", "honest-token-b-0123456789", "honest-token-c-0123456789"]  # one per site
VOLUNTEER = "volunteer-token-9876543210"
RUN = [*TINY, "--inner_lr=3e-3", "--rounds=14", "--inner_steps=10", "--min_quorum=2", "--round_timeout_s=5",
       "--eval_every=0", "--metrics_listen=127.0.0.1:0", "--max_joins_per_token_per_minute=20"]
SHAPES = gpt_shapes()
FLT_MAX = 3.4028235e38


def metrics(port):
    """{(name, frozenset(labels)): value} from the server's /metrics text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for name, labels, value in re.findall(r"^(\w+)(?:\{(.*?)\})? (\S+)$", text, re.M):
        out[(name, frozenset(re.findall(r'(\w+)="([^"]*)"', labels)))] = float(value)
    return out


def metric(m, name, **labels):
    return m.get((name, frozenset(labels.items())), 0.0)


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class RawFlood:
    """Raw TCP connections that never send a byte, opened as fast as one thread can, the
    newest `hold` kept open (the rest closed on this side to stay within our own fd limit)."""

    def __init__(self, port, hold=1500):
        self.port, self.hold, self.opened = port, hold, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        held = collections.deque()
        while not self.stop.is_set():
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", self.port))
            except OSError:
                s.close()
                continue
            held.append(s)
            self.opened += 1
            while len(held) > self.hold:
                held.popleft().close()
        for s in held:
            s.close()

    def end(self):
        self.stop.set()
        self.thread.join()


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


class Adversary(ClusterTest):
    def start(self, *flags, tag=""):
        tokens = self.path("tokens")
        with open(tokens, "w") as f:
            f.write(f"site-a {HONEST[0]}\nsite-b {HONEST[1]}\nsite-c {HONEST[2]}\nvolunteer {VOLUNTEER}\n")
        for i, token in enumerate(HONEST):
            with open(self.path(f"honest{i}.token"), "w") as f:
                f.write(token + "\n")
        server, addr = self.start_server(*RUN, *flags, f"--join_tokens={tokens}", "--linger_s=60",
                                         transport=("--insecure",), name=tag + "server")
        port = int(self.wait_for(server, r"metrics on port (\d+)", 30).group(1))
        workers = [self.start_worker(addr, f"--token_file={self.path(f'honest{i}.token')}", f"--name=honest{i}",
                                     name=f"{tag}w{i}") for i in range(2)]
        for i in range(2):  # both honest joins first: their data seeds match the clean run's
            self.wait_for(server, rf"\(honest{i}@site-{'ab'[i]}\) joined", 60)
        return server, addr, port, workers

    def final_losses(self, workers):
        out = []
        for w in workers:
            self.assertEqual(w.wait(timeout=300), 0, w.text())
            out.append(float(re.search(r"final: val_loss ([\d.]+)", w.text()).group(1)))
        return out

    def test_hostile_volunteer_cannot_stop_or_spoil_the_run(self):
        server, _, _, workers = self.start(tag="clean-")
        clean = self.final_losses(workers)
        self.assertEqual(server.wait(timeout=60), 0, server.text())

        server, addr, port, workers = self.start()
        adv = Peer(addr)
        adv.join(name="mallory", token=VOLUNTEER)
        honest_ids = [adv.id - 1, adv.id - 2]  # ids are labels, not secrets: guessable
        codes, attacked, stop = {}, set(), threading.Event()

        def note(what, code):
            codes.setdefault(what, set()).add(code)

        def attack():
            while not stop.is_set():
                try:
                    r = adv.heartbeat().round
                except grpc.RpcError:
                    return
                if r in attacked or r >= 14:  # 14: the run is over
                    time.sleep(0.02)
                    continue
                attacked.add(r)
                note("FLT_MAX values", code_of(adv.push, r, lloyd_payload(SHAPES, [-FLT_MAX, -1, 1, FLT_MAX])))
                note("1e38 tables", code_of(adv.push, r, lloyd_payload(SHAPES, [-1e38, -1e37, 1e37, 1e38])))
                note("NaN", code_of(adv.push, r, lloyd_payload(SHAPES, [float("nan"), 0, 0, 0])))
                for hid in honest_ids:
                    note("push as another id", code_of(adv.push, r, lloyd_payload(SHAPES, [0, 0, 0, 0]), worker=hid))
                    note("leave as another id", code_of(adv.leave, worker=hid))
                    note("heartbeat as another id", code_of(adv.heartbeat, worker=hid))
                    note("no session", code_of(adv.leave, worker=hid, key=""))
                # x1000 an honest update's scale, all one direction: valid, so screened.
                note("x1000", code_of(adv.push, r, lloyd_payload(SHAPES, [-10, -3, 3, 10], vector_values=-10)))

        t = threading.Thread(target=attack)
        t.start()
        try:
            attacked_losses = self.final_losses(workers)
        finally:
            stop.set()
            t.join()
        # Floods once the honest workers are done (their data order is unaffected).
        joins = [code_of(Peer(addr).join, name=f"sybil{i}", token=VOLUNTEER) for i in range(40)]
        m = metrics(port)
        self.assertIsNone(server.p.poll(), "server died")
        adv.leave()
        self.assertEqual(server.wait(timeout=90), 0, server.text())

        print(f"clean {clean}, attacked {attacked_losses}, rounds attacked {len(attacked)}, codes {codes}")
        for a, c in zip(attacked_losses, clean):
            self.assertLess(abs(a - c) / c, 0.05, (attacked_losses, clean))
        self.assertGreaterEqual(len(attacked), 10)
        G = grpc.StatusCode
        want = {"FLT_MAX values": {G.INVALID_ARGUMENT}, "1e38 tables": {G.INVALID_ARGUMENT}, "NaN": {G.INVALID_ARGUMENT},
                "push as another id": {G.PERMISSION_DENIED}, "leave as another id": {G.PERMISSION_DENIED},
                "heartbeat as another id": {G.PERMISSION_DENIED}, "no session": {G.UNAUTHENTICATED}}
        for what, code in want.items():
            self.assertEqual(codes[what], code, what)
        self.assertIn(G.OK, codes["x1000"])  # accepted, then clipped
        self.assertIn(G.RESOURCE_EXHAUSTED, joins)  # 20 joins per minute per token
        # Every attack in the metrics.
        self.assertGreaterEqual(metric(m, "muloco_screened_updates_total", worker="mallory@volunteer", action="clip"), 5)
        # Honest updates may be clipped to a tensor's median (the bound), but never left out.
        for i, site in enumerate("ab"):
            self.assertEqual(metric(m, "muloco_screened_updates_total", worker=f"honest{i}@site-{site}", action="reject"), 0)
        self.assertGreaterEqual(metric(m, "muloco_rejected_pushes_total", reason="bad_payload"), 3 * len(attacked))
        self.assertGreaterEqual(metric(m, "muloco_refused_calls_total", reason="bad_session"), 6 * len(attacked))
        self.assertGreaterEqual(metric(m, "muloco_refused_calls_total", reason="join_limit"), 1)
        self.assertEqual(metric(m, "muloco_downlink_resets_total"), 0)
        for i in range(2):  # the honest workers were never kicked out
            self.assertNotRegex(server.text(), rf"evicting worker \d+ \(honest{i}")

    def attack_table(self, names, honest, *flags):
        """bench/attacks.py (the independent client of attacks.py): each attack in its own run
        beside `honest` workers, two seeds, 10 rounds. Returns {attack: the row's cells}: sessions
        admitted, honest final loss, vs clean, rounds, wall s, pushes, screened, rounds waited."""
        out = self.path(f"attacks-{honest}.md")
        bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "attacks.py")
        r = subprocess.run([sys.executable, bench, "--build", BUILD, "--seeds", "2", "--honest", str(honest),
                            "--attacks", ",".join(names), "--out", out, "--logs", self.path(f"attack-logs-{honest}"),
                            *flags],
                           capture_output=True, text=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        with open(out) as f:
            table = f.read()
        print(table.split("\n\n")[0])
        rows = {}
        for line in table.split("\n\n")[0].splitlines()[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
        self.assertIn("clean", rows)
        return rows

    def assert_bounded(self, rows, names, bound):
        for name in names:
            vs = rows[name][2]
            self.assertLess(float(vs.rstrip("%")), bound, f"{name}: {rows[name][1]} ({vs})")

    def test_valid_hostile_updates_are_bounded(self):
        """One hostile volunteer beside two honest workers, the honest workers' mean final loss
        over two seeds against the clean runs of the same seeds. Bound: 1% (the aim for one
        hostile volunteer); measured at HEAD in bench/README. Availability: a volunteer silent in
        alternate rounds makes at most log2(10) + 1 = 4 of the 10 rounds wait for it (its backoff
        doubles); three silent tokens, none."""
        names = ["scale-1000", "scale+1000", "one_tensor", "stealthy", "zeros", "negated_replay", "late",
                 "alternate", "sybil3-stealthy", "silent3"]
        rows = self.attack_table(names, honest=2)
        self.assert_bounded(rows, names, 1.0)
        self.assertEqual(rows["sybil3-stealthy"][0], "1/3")  # one session per token
        self.assertLessEqual(int(rows["alternate"][-1]), 4)
        self.assertEqual(int(rows["silent3"][-1]), 0)

    def test_colluding_volunteers_are_bounded(self):
        """Two colluding tokens beside three honest workers. Bound: 3% (the aim for two
        colluders); measured at HEAD in bench/README. Every round waits for all three honest
        workers (a round of 60 s at most): on a loaded machine a 5 s deadline cut honest workers
        out of rounds, leaving the colluders half the votes (+6% once, in CI)."""
        names = ["collude2-scale", "collude2-stealthy"]
        self.assert_bounded(self.attack_table(names, 3, "--round_timeout_s=60"), names, 3.0)

    def test_floods_leave_memory_and_threads_bounded(self):
        server, addr, port, workers = self.start("--transport_memory_mb=64", "--rounds=12", "--inner_steps=100",
                                                 "--max_await_s=2",
                                                 "--idle_timeout_s=3", "--max_threads=64")
        pid = server.p.pid
        self.wait_for(server, r"round 1 closed", 120)
        rss0, threads0, fds0 = status_kib(pid, "VmRSS"), status_kib(pid, "Threads"), open_fds(pid)
        adv = Peer(addr)
        adv.join(name="flood", token=VOLUNTEER)
        peak = {"rss": rss0, "threads": threads0, "fds": fds0}
        done = threading.Event()

        def watch():
            while not done.is_set():
                peak["rss"] = max(peak["rss"], status_kib(pid, "VmRSS"))
                peak["threads"] = max(peak["threads"], status_kib(pid, "Threads"))
                peak["fds"] = max(peak["fds"], open_fds(pid))
                time.sleep(0.05)
        w = threading.Thread(target=watch)
        w.start()
        try:
            G = grpc.StatusCode
            # Never-read model fetches: at most 4 in flight per worker, the rest refused at once.
            streams = [adv._fetch(pb.FetchModelRequest(worker_id=adv.id), metadata=adv.md(), timeout=30)
                       for _ in range(200)]
            refused = 0
            for s in streams:
                try:
                    next(s)
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), G.RESOURCE_EXHAUSTED)
                    refused += 1
            self.assertGreater(refused, 0)
            # Four waits for the open round hold their slots; a fifth is refused. (Should the
            # round close meanwhile, the waits are answered and free their slots: try the next.)
            fifth = []
            for _ in range(5):
                r = adv.heartbeat().round
                waits = [adv._await(pb.AwaitRoundRequest(worker_id=adv.id, round=r), metadata=adv.md(), timeout=30)
                         for _ in range(4)]
                time.sleep(0.2)  # let them reach the server
                fifth.append(code_of(adv.await_round, r))
                for s in waits:
                    s.cancel()
                if fifth[-1] != G.OK:
                    break
            self.assertEqual(fifth[-1], G.RESOURCE_EXHAUSTED, fifth)
            # Strangers' streams without a session end at once; 300 joins hit the rate limit.
            anon = [code_of(adv.await_round, 0, worker=adv.id, key="") for _ in range(200)]
            self.assertEqual(set(anon), {G.UNAUTHENTICATED})
            joins = [code_of(Peer(addr).join, name="j", token=VOLUNTEER, timeout=5) for _ in range(300)]
            self.assertLessEqual(joins.count(G.OK), 20)
            # 2,000 PushProgress calls at once from one session: each holds one of its stream
            # slots while it runs, so the rest are refused, and gRPC's thread quota holds.
            calls = [adv._progress.future(pb.PushProgressRequest(worker_id=adv.id, round=1), metadata=adv.md(),
                                          timeout=30) for _ in range(2000)]
            codes = collections.Counter(code_of(c.result) for c in calls)
            self.assertLessEqual(set(codes), {G.OK, G.RESOURCE_EXHAUSTED}, codes)
            # Raw connections that never speak (no TLS, no HTTP/2), as fast as one thread opens
            # them: the gate (--max_connections_per_address, 64 by default) displaces the silent
            # ones, and a new honest worker joins in the middle of it.
            flood = RawFlood(int(addr.split(":")[1]))
            try:
                while flood.opened < 3000:
                    time.sleep(0.05)
                late = self.start_worker(addr, f"--token_file={self.path('honest2.token')}", "--name=honest2",
                                         name="w2")
                self.wait_for(server, r"\(honest2@site-c\) joined", 120)
            finally:
                flood.end()
            print(f"raw flood: {flood.opened} connections opened while honest2 joined")
            workers.append(late)
            # One 300 MB message: cut off by the transport's memory quota (RESOURCE_EXHAUSTED),
            # by the watchdog when no chunk reaches the handler for --idle_timeout_s (CANCELLED),
            # or, on a busy machine, with its connection (UNAVAILABLE); never accepted. That the
            # server kept serving is checked next: every honest worker finishes.
            big = b"\0" * (300 << 20)
            self.assertIn(code_of(adv.push, 1, big, chunk=len(big), timeout=60),
                          {G.RESOURCE_EXHAUSTED, G.CANCELLED, G.UNAVAILABLE})
            del big
            for wk in workers:
                self.assertEqual(wk.wait(timeout=300), 0, wk.text())
        finally:
            done.set()
            w.join()
        rss1, threads1 = status_kib(pid, "VmRSS"), status_kib(pid, "Threads")
        print(f"server RSS {rss0} KiB before, peak {peak['rss']}, after {rss1}; threads {threads0} before, "
              f"peak {peak['threads']}, after {threads1}; open files {fds0} before, peak {peak['fds']}")
        # The gate holds 64 connections from one address (all of ours come from 127.0.0.1): at
        # most three descriptors each (client, both ends of the Unix connection to gRPC; a
        # silent one holds only the first), however many were opened (300 joins, 3,000 raw).
        self.assertLessEqual(peak["fds"] - fds0, 3 * 64 + 32)
        self.assertLess(peak["rss"] - rss0, 160 * 1024)
        # What the flood freed goes back to the system (the server trims its heap every
        # second): +2 MB measured after, where glibc's retention alone kept +30 to +69 MB.
        self.assertLess(rss1 - rss0, 32 * 1024)
        # gRPC's thread quota (--max_threads) bounds the handler threads however many calls
        # arrive at once; the calls past it are refused with RESOURCE_EXHAUSTED.
        self.assertLessEqual(peak["threads"], threads0 + 64)
        # The flooder went silent after its flood: the server evicts it (30 s) and, the run
        # over and nobody left, exits cleanly. (Leaving here raced that eviction and the
        # server's shutdown.)
        self.assertEqual(server.wait(timeout=90), 0, server.text())


if __name__ == "__main__":
    unittest.main()
