"""The asynchronous mode (--sync=async): no round barrier. Beside two workers, one four times
slower (--slowdown=4): rounds close at the quorum and the grace window without waiting for it,
its pushes are merged later with their staleness in the server's log, it contributes fewer
rounds than the others, and every worker ends on the server's final model bit for bit. A
worker killed with SIGKILL mid-run: the rounds after its death close as fast as before (no
round waits for it, though the heartbeat timeout would take 30 s to evict it); started again,
it joins, takes up the training saved in its --state_file (rebased onto the current model),
contributes and ends on the server's model too; a garbage state file is refused and its
worker trains afresh. A fast worker whose round waits for the quorum trains on instead of waiting (the steps past
its tell unclaimed). A worker stopped (SIGSTOP) until its
replica is too stale: its push is refused, and its steps and those it trained since carry on
from the fetched model. A worker stopped with SIGTERM while its push waits for the quorum lands that
push, pushes the steps it trained since, and leaves; the quorum (2) then shrinks to the one
worker still heard from, which finishes the run alone."""
import os
import re
import signal
import time
import unittest

from harness import TINY, ClusterTest

ASYNC = [*TINY, "--sync=async", "--inner_steps=10", "--min_quorum=2", "--grace_max_s=2", "--round_timeout_s=60"]
SETTLED = re.compile(r"round \d+: train_loss")  # one per exchange that counted (worker log)
CLOSED = re.compile(r"round (\d+) closed: (\d+) contributors.*?\(async: (\d+) of (\d+) pushes stale, up to (\d+) versions")


class Async(ClusterTest):
    def finish(self, server, workers, names):
        for w in workers:
            self.assertEqual(w.wait(timeout=300), 0, w.text()[-3000:])
        self.assertEqual(server.wait(timeout=60), 0, server.text()[-3000:])
        final = self.read_bytes("server.bin")
        for name in names:
            self.assertEqual(self.read_bytes(f"{name}.bin"), final, f"{name} differs from the server")

    def test_a_slow_worker_is_merged_late_and_never_waited_for(self):
        server, addr = self.start_server(*ASYNC, "--rounds=16", f"--save_final={self.path('server.bin')}")
        names = ["fast0", "fast1", "slow"]
        workers = [self.start_worker(addr, f"--name={n}", f"--save_final={self.path(n + '.bin')}",
                                     *(["--slowdown=4"] if n == "slow" else []), name=n) for n in names]
        self.finish(server, workers, names)
        closes = CLOSED.findall(server.text())
        self.assertEqual(len(closes), 16, server.text()[-3000:])
        stale = sum(int(c[2]) for c in closes)
        print(f"stale pushes {stale}, most lag {max(int(c[4]) for c in closes)}")
        self.assertGreater(stale, 0)  # the slow worker's pushes, merged from older versions
        counted = {n: len(SETTLED.findall(w.text())) for n, w in zip(names, workers)}
        print(f"rounds whose update each worker applied after its push counted: {counted}")
        self.assertGreaterEqual(counted["slow"], 1)
        self.assertGreater(min(counted["fast0"], counted["fast1"]), 1.5 * counted["slow"])
        self.assertNotIn("straggler", server.text())
        self.assertIn("(async)", workers[0].text())  # the run's mode, from the server's config

    def test_a_fast_worker_trains_on_while_its_round_waits_for_the_quorum(self):
        server, addr = self.start_server(*ASYNC, "--rounds=8", f"--save_final={self.path('server.bin')}")
        names = ["fast", "slow"]  # --min_quorum=2: every round waits for the slow worker's push
        workers = [self.start_worker(addr, f"--name={n}", f"--save_final={self.path(n + '.bin')}",
                                     *(["--slowdown=4"] if n == "slow" else []), name=n) for n in names]
        self.finish(server, workers, names)
        extra = [int(x) for x in re.findall(r"\(\+(\d+) steps while the last push was in the air\)", workers[0].text())]
        print(f"steps the fast worker trained on while its push waited, per round: {extra}")
        self.assertGreaterEqual(len(extra), 2, workers[0].text()[-3000:])
        self.assertTrue(all(0 < x <= 10 for x in extra), extra)  # at most as many steps again as told (H = 10)
        self.assertNotIn("told at most", server.text())  # unclaimed: no claim over the cap

    def test_a_killed_worker_holds_no_round_and_comes_back(self):
        # --max_staleness=100: the saved training is still young enough when it comes back.
        server, addr = self.start_server(*ASYNC, "--rounds=60", "--max_staleness=100",
                                         f"--save_final={self.path('server.bin')}")
        names = ["w0", "w1"]
        with open(self.path("garbage.state"), "w") as f:
            f.write("not a state file\n")
        workers = [self.start_worker(addr, f"--name={n}", f"--save_final={self.path(n + '.bin')}",
                                     *([f"--state_file={self.path('garbage.state')}"] if n == "w1" else []), name=n)
                   for n in names]
        state = self.path("victim.state")  # saved every 50 ms, dropped at each push
        keep = [f"--state_file={state}", "--state_every_s=0.05", "--slowdown=4"]
        victim = self.start_worker(addr, "--name=victim", *keep, name="victim")
        self.wait_for(server, r"round 4 closed", 120)
        self.kill_with_saved_state(victim, state)  # mid-round, with some training saved
        killed = time.time()
        after = max(int(r) for r in re.findall(r"round (\d+) closed", server.text())) + 3
        self.wait_for(server, rf"round {after} closed", 25)  # eviction alone would take 30 s
        self.assertNotIn("evicting", server.text())  # so the rounds closed without it, not after its eviction
        print(f"3 rounds closed {time.time() - killed:.1f} s after the kill")
        again = self.start_worker(addr, "--name=victim", f"--save_final={self.path('victim.bin')}", *keep, name="again")
        # It takes up the saved steps, rebased onto the server's model, and its first push
        # carries them.
        resumed = self.wait_for(again, r"resumed (\d+) steps of local training from .*? \(counted from round (\d+)'s", 60)
        print(f"resumed: {resumed.group(0)}")
        self.assertGreaterEqual(int(resumed.group(1)), 1)
        self.finish(server, [*workers, again], [*names, "victim"])
        self.assertGreaterEqual(len(SETTLED.findall(again.text())), 1, again.text()[-3000:])
        self.assertFalse(os.path.exists(state))  # the run is over: nothing left to resume
        self.assertIn("not a muloco-worker state file", workers[1].text())  # refused, and w1 trained on

    def test_a_stalled_worker_keeps_its_training_past_a_refused_push(self):
        server, addr = self.start_server(*ASYNC, "--rounds=60", "--max_staleness=1",
                                         f"--save_final={self.path('server.bin')}")
        names = ["w0", "w1", "sleeper"]
        workers = [self.start_worker(addr, f"--name={n}", f"--save_final={self.path(n + '.bin')}", name=n)
                   for n in names]
        sleeper = workers[2]
        self.wait_for(server, r"round 3 closed", 120)
        sleeper.p.send_signal(signal.SIGSTOP)
        after = max(int(r) for r in re.findall(r"round (\d+) closed", server.text())) + 4
        self.wait_for(server, rf"round {after} closed", 60)  # its replica is now over 1 version behind
        sleeper.p.send_signal(signal.SIGCONT)
        # Its next push is refused as too stale; its steps and those trained since move onto
        # the fetched model (before, both were dropped with the push), and its later pushes count.
        carried = self.wait_for(sleeper, r"the (\d+) steps trained since the lost push and its own (\d+) carry on", 60)
        self.assertGreaterEqual(int(carried.group(2)), 1)
        self.finish(server, workers, names)
        later = sleeper.text()[sleeper.text().index(carried.group(0)):]
        self.assertGreaterEqual(len(SETTLED.findall(later)), 1, later[-3000:])
        self.assertIn("versions behind round", sleeper.text())

    def test_a_stopped_worker_pushes_its_last_steps_and_the_quorum_shrinks(self):
        server, addr = self.start_server(*ASYNC, "--rounds=12", f"--save_final={self.path('server.bin')}")
        leaver = self.start_worker(addr, "--name=leaver", "--slowdown=2", "--progress_s=0.02", name="leaver")
        slow = self.start_worker(addr, "--name=slow", f"--save_final={self.path('slow.bin')}", "--slowdown=8",
                                 name="slow")
        # Mid-round (a progress line), its last push waiting for the slow worker's.
        self.wait_for(leaver, r"round [3-9]: step \d+/", 120)
        leaver.p.send_signal(signal.SIGTERM)
        self.assertEqual(leaver.wait(timeout=60), 0, leaver.text()[-3000:])
        parting = re.search(r"pushed the (\d+) steps trained since the last push \(from round (\d+)\) before leaving",
                            leaver.text())
        self.assertIsNotNone(parting, leaver.text()[-3000:])
        steps, base = int(parting.group(1)), int(parting.group(2))
        print(f"the leaver's parting push: {steps} steps from version {base}")
        self.assertGreater(steps, 0)
        self.finish(server, [slow], ["slow"])  # alone: min_quorum 2 would have held every round
        merged = {int(r): int(k) for r, k in re.findall(r"round (\d+) closed: .*?; (\d+) inner steps merged",
                                                         server.text())}
        # It counts in the round open when it arrived: `base`'s, or a later one had that closed.
        self.assertGreaterEqual(max(merged.get(r, 0) for r in range(base, base + 3)), steps, server.text()[-3000:])
        self.assertEqual(len(merged), 12)


if __name__ == "__main__":
    unittest.main()
