"""Operating a worker: readable progress while a round trains (--progress_s), the end-of-run
summary table, graceful stops (SIGTERM / SIGINT make a worker push the steps it trained since
its last push, counted as what they are, send Leave and exit 0; with --leave_timeout_s=0 it
drops them; a worker waiting on a round's long poll leaves at once), and
evaluation outside the training: --defer_eval writes the models a worker would have
evaluated, and --evaluate gives the same losses afterwards."""
import datetime
import os
import re
import shutil
import signal
import subprocess
import time
import unittest

from harness import TINY, WORKER_BIN, ClusterTest

# "2026-12-03T16:20:01.123Z INFO [worker w0] message"
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (INFO|WARN|ERROR) \[([^\]]*)\] (.*)$", re.M)
PROGRESS = re.compile(r"round (\d+): step (\d+)/(\d+) \((\d+)%\), ([\d.]+) tokens/s, ([\d.]+) s in, "
                      r"local training ends in ([\d.]+) s \(at (\d\d:\d\d:\d\d)Z\)$")
TOKENS_PER_STEP = 8 * 32  # TINY: batch 8, context 32


def lines(proc, tag=None):
    """[(utc datetime, level, tag, message)] of a process log, every line checked for shape."""
    text = proc.text()
    out = []
    for raw in text.splitlines():
        m = LINE.match(raw)
        if m is None:
            continue  # e.g. a library's own stderr
        when = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
        if tag is None or m.group(3) == tag:
            out.append((when, m.group(2), m.group(3), m.group(4)))
    return out


class Progress(ClusterTest):
    def test_progress_lines_while_a_round_trains(self):
        server, addr = self.start_server(*TINY, "--rounds=2", "--inner_steps=200")
        w = self.start_worker(addr, "--name=w0", "--progress_s=0.2", name="w0")
        self.assertEqual(w.wait(timeout=300), 0, w.text())
        log = lines(w, "worker w0")
        self.assertTrue(log, w.text())
        self.assertFalse(re.search(r"\[worker \d+\]", w.text()), "workers are tagged by name, not id")
        self.assertEqual(server.wait(timeout=60), 0, server.text())

        for rnd in (0, 1):
            progress = [(when, PROGRESS.match(msg)) for when, _, _, msg in log
                        if PROGRESS.match(msg) and PROGRESS.match(msg).group(1) == str(rnd)]
            self.assertGreaterEqual(len(progress), 2, w.text())
            closed = [when for when, _, _, msg in log if msg.startswith(f"round {rnd}: train_loss")]
            self.assertEqual(len(closed), 1, w.text())
            steps = [int(m.group(2)) for _, m in progress]
            self.assertEqual(steps, sorted(set(steps)), "steps strictly increase")
            self.assertLess(steps[-1], 200)
            for when, m in progress:
                done, total, pct = int(m.group(2)), int(m.group(3)), int(m.group(4))
                rate, elapsed, eta = float(m.group(5)), float(m.group(6)), float(m.group(7))
                self.assertEqual(total, 200)
                self.assertAlmostEqual(pct, 100 * done / total, delta=1)
                self.assertGreaterEqual(elapsed, 0.15)  # not before the first period
                # tokens/s follows from the steps done in the time elapsed (printed to 0.1 s),
                # and the ETA from that rate.
                self.assertGreaterEqual(rate, done * TOKENS_PER_STEP / (elapsed + 0.051))
                self.assertLessEqual(rate, done * TOKENS_PER_STEP / (elapsed - 0.051))
                self.assertAlmostEqual(eta, (total - done) * TOKENS_PER_STEP / rate, delta=0.06 + 0.01 * eta)
                # The predicted end lands near the real one (the round's line, after push and
                # await): within half the round's length, plus a second for slow early steps.
                predicted = when + datetime.timedelta(seconds=eta)
                round_s = elapsed + eta
                self.assertLess(abs((predicted - closed[0]).total_seconds()), 0.5 * round_s + 1.0, m.group(0))
                clock = datetime.datetime.strptime(m.group(8), "%H:%M:%S").time()
                drift = abs((datetime.datetime.combine(predicted.date(), clock) - predicted).total_seconds())
                self.assertLess(min(drift, 86400 - drift), 1.5, m.group(0))

        # The summary table follows the final line.
        text = w.text()
        self.assertRegex(text, r"final: val_loss [\d.]+ \(start [\d.]+\) after 2 rounds")
        self.assertRegex(text, r"summary: rounds +2\n")
        self.assertRegex(text, rf"summary: tokens +{2 * 200 * TOKENS_PER_STEP} \(\d+ tokens/s while training")
        up = re.search(r"summary: up +(\d+) bytes \(([\d.]+)x smaller than dense fp32, [\d.]+ bits/param\)", text)
        self.assertIsNotNone(up, text)
        self.assertEqual(int(up.group(1)), sum(int(b) for b in re.findall(r"train_loss [\d.]+, up (\d+) bytes", text)))
        self.assertGreater(float(up.group(2)), 1)
        self.assertRegex(text, r"summary: down +\d+ bytes \([\d.]+x smaller than dense fp32, [\d.]+ bits/param\)")
        losses = self.val_losses(w)
        self.assertRegex(text, rf"summary: val_loss +{losses[0]:.4f} first, {losses[2]:.4f} last")
        self.assertRegex(text, r"summary: wall time +[\d.]+ s \([\d.]+ s training, [\d.]+ s waiting for the server\)")

    def test_no_progress_lines_by_default_on_short_runs(self):
        server, addr = self.start_server(*TINY, "--rounds=2", "--inner_steps=12")
        w = self.start_worker(addr, "--name=quiet", name="quiet")
        self.assertEqual(w.wait(timeout=120), 0, w.text())
        self.assertNotRegex(w.text(), r"step \d+/\d+")
        self.assertRegex(w.text(), r"\[worker quiet\] round 1: train_loss")
        self.assertRegex(w.text(), r"summary: rounds +2")


class GracefulStop(ClusterTest):
    def worker_id(self, worker):
        return int(self.wait_for(worker, r"joined .* \(id (\d+)\) at round", timeout=60).group(1))

    def assert_left(self, server, worker, worker_id, sig_name, within_s=5):
        start = time.time()
        self.assertEqual(worker.wait(timeout=within_s + 5), 0, worker.text())
        self.assertLess(time.time() - start, within_s, worker.text())
        self.wait_for(server, rf"worker {worker_id} left", timeout=5)
        self.assertRegex(worker.text(), rf"\[worker w0\] leaving: {sig_name}")
        self.assertNotRegex(worker.text(), r"ERROR")

    def test_sigterm_after_a_round_leaves_and_exits_zero(self):
        server, addr = self.start_server(*TINY, "--rounds=1000", "--inner_steps=20")
        w = self.start_worker(addr, "--name=w0", name="w0")
        wid = self.worker_id(w)
        self.wait_for(server, r"round 0 closed", timeout=120)
        w.p.send_signal(signal.SIGTERM)
        self.assert_left(server, w, wid, "SIGTERM")
        self.assertRegex(w.text(), r"summary: rounds +\d+")
        self.assertIsNone(server.p.poll(), "the server keeps serving")

    def test_sigterm_mid_round_pushes_the_steps_trained(self):
        # One worker, quorum 1: its parting push closes round 0 at once, merging exactly the
        # steps it says it trained (of the 100000 it was to take).
        server, addr = self.start_server(*TINY, "--rounds=10", "--inner_steps=100000")
        w = self.start_worker(addr, "--name=w0", "--progress_s=0.1", name="w0")
        wid = self.worker_id(w)
        self.wait_for(w, r"round 0: step \d+/100000", timeout=60)
        w.p.send_signal(signal.SIGTERM)
        self.assert_left(server, w, wid, "SIGTERM")
        steps = int(re.search(r"pushed the (\d+) steps trained since the last push \(from round 0\) before leaving",
                              w.text()).group(1))
        self.assertGreater(steps, 0)
        self.assertLess(steps, 100000)
        closed = self.wait_for(server, r"round 0 closed: 1 contributors.*?; (\d+) inner steps merged", timeout=10)
        self.assertEqual(int(closed.group(1)), steps)

    def test_sigterm_mid_round_with_no_leave_time_drops_the_partial_round(self):
        # As above, but --leave_timeout_s=0: no "round 0 closed" after the worker has left
        # means the half-trained round never went out.
        server, addr = self.start_server(*TINY, "--rounds=10", "--inner_steps=100000")
        w = self.start_worker(addr, "--name=w0", "--progress_s=0.1", "--leave_timeout_s=0", name="w0")
        wid = self.worker_id(w)
        self.wait_for(w, r"round 0: step \d+/100000", timeout=60)
        w.p.send_signal(signal.SIGTERM)
        self.assert_left(server, w, wid, "SIGTERM")
        self.assertNotRegex(server.text(), r"round 0 closed")

    def test_sigint_while_awaiting_a_round_cancels_the_long_poll(self):
        # Quorum 2 with one worker: after its push the worker waits in AwaitRound, which the
        # server holds for up to --max_await_s=30; the stop must not wait that long.
        server, addr = self.start_server(*TINY, "--rounds=10", "--inner_steps=5", "--min_quorum=2",
                                         "--round_timeout_s=300", "--max_await_s=30")
        w = self.start_worker(addr, "--name=w0", name="w0")
        wid = self.worker_id(w)
        self.wait_for(w, r"eval: round 0", timeout=60)
        time.sleep(2)  # 5 tiny steps take well under a second: the worker is now in the long poll
        w.p.send_signal(signal.SIGINT)
        self.assert_left(server, w, wid, "SIGINT", within_s=4)
        self.assertNotRegex(w.text(), r"round 0: train_loss")


class DeferredEvaluation(ClusterTest):
    RUN = [*TINY, "--rounds=3", "--inner_steps=10", "--eval_every=1"]

    def run_one(self, tag, *worker_flags):
        """One worker's run of RUN (deterministic: one worker, fixed seeds); its log text."""
        server, addr = self.start_server(*self.RUN, name=tag + "server")
        w = self.start_worker(addr, f"--name={tag}", *worker_flags, name=tag)
        self.assertEqual(w.wait(timeout=120), 0, w.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        return w.text()

    def evaluate(self, *args):
        return subprocess.run([WORKER_BIN, *args], capture_output=True, text=True, timeout=120)

    def test_deferred_models_evaluate_to_the_in_run_losses(self):
        in_run_text = self.run_one("inrun")
        in_run = dict(re.findall(r"eval: round (\d+) val_loss ([\d.]+)", in_run_text))
        models = self.path("models")
        deferred = self.run_one("deferred", f"--defer_eval={models}", f"--save_final={self.path('final.bin')}")
        written = re.findall(r"eval: round (\d+) deferred to (\S+)", deferred)
        self.assertEqual([r for r, _ in written], ["0", "1", "2", "3"], deferred)  # 3: the final model
        self.assertEqual(sorted(os.listdir(models)), [f"round-00000{r}.bin" for r in range(4)] + ["run_config.txtpb"])
        self.assertEqual(set(in_run), {"0", "1", "2", "3"})
        final = re.search(r"final: val_loss ([\d.]+)", deferred)[1]
        self.assertEqual(final, in_run["3"])
        checksum = r"final: .* checksum ([0-9a-f]+)"
        self.assertEqual(re.search(checksum, deferred)[1], re.search(checksum, in_run_text)[1],
                         "deferring evaluations does not change the training")

        # No run flags: the configuration the worker wrote beside its models is the run's.
        r = self.evaluate(f"--evaluate={models},{self.path('final.bin')}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("run configuration from " + os.path.join(models, "run_config.txtpb"), r.stderr)
        got = re.findall(r"^(\S+) val_loss ([\d.]+)$", r.stdout, re.M)
        self.assertEqual(got, [(path, in_run[rnd]) for rnd, path in written] + [(self.path("final.bin"), final)])
        self.assertGreater(float(in_run["0"]), float(final))  # it trained
        # A flag overrides the file: another model width is not this model.
        wider = self.evaluate(f"--evaluate={models}", "--d_model=48")
        self.assertEqual(wider.returncode, 1, wider.stderr)
        self.assertIn("not a model of this run configuration", wider.stderr)
        # Two runs' models with different configurations do not share one evaluation.
        other = self.path("other")
        shutil.copytree(models, other)
        with open(os.path.join(other, "run_config.txtpb")) as f:
            text = f.read()
        with open(os.path.join(other, "run_config.txtpb"), "w") as f:
            f.write(re.sub(r"eval_batches: (\d+)", lambda m: f"eval_batches: {int(m[1]) + 1}", text))
        mixed = self.evaluate(f"--evaluate={models},{other}")
        self.assertEqual(mixed.returncode, 2, mixed.stderr)
        self.assertIn("different runs' configurations", mixed.stderr)
        self.assertEqual(mixed.stdout, "")

    def test_evaluate_refuses_what_is_not_a_model_of_the_run(self):
        short = self.path("short.bin")
        with open(short, "wb") as f:
            f.write(b"\0" * 400)
        missing = self.path("missing.bin")
        r = self.evaluate(f"--evaluate={short},{missing}", *TINY)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"short\.bin: 400 bytes, but this run config's model has \d+ parameters")
        self.assertIn("missing.bin", r.stderr)
        self.assertEqual(r.stdout, "")
        both = self.evaluate("--baseline", f"--evaluate={short}", *TINY)
        self.assertEqual(both.returncode, 2)
        self.assertIn("two modes", both.stderr)
        nothing = self.evaluate(f"--evaluate={short}", *TINY, "--eval_batches=0")
        self.assertEqual(nothing.returncode, 2)
        self.assertIn("--eval_batches >= 1", nothing.stderr)
        ignored = self.evaluate("--baseline", f"--defer_eval={self.path('d')}", *TINY)
        self.assertEqual(ignored.returncode, 2)
        self.assertIn("not --baseline", ignored.stderr)
        blocked = self.evaluate("--server=127.0.0.1:1", f"--defer_eval={short}/models")  # a file in the way
        self.assertEqual(blocked.returncode, 2)
        self.assertIn("--defer_eval", blocked.stderr)


if __name__ == "__main__":
    unittest.main()
