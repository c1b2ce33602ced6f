"""A smoke run of bench/chaos.py (goodput under failures): two workers, short runs, a failure
schedule dense enough to hold kills, stalls and cut links. Checks that the four runs happened
with the schedule applied, that their table and JSON are written, and that the figures are
sane: every run merged inner steps, and no goodput is above what the workers could compute
(with a margin for speeds measured on a loaded machine)."""
import json
import os
import subprocess
import sys
import unittest

from harness import BUILD, ClusterTest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "chaos.py")


class Chaos(ClusterTest):
    def test_a_short_chaos_run_reports_every_run(self):
        out = self.path("out")
        r = subprocess.run([sys.executable, BENCH, f"--build={BUILD}", "--slowdowns=1,2", "--inner_steps=5",
                            "--eval_every=2", "--duration=15", "--mtbf_rounds=20", "--seed=3", f"--out={out}",
                            f"--logs={self.path('logs')}"], capture_output=True, text=True, timeout=400)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        print(r.stdout)
        with open(os.path.join(out, "chaos.json")) as f:
            report = json.load(f)
        self.assertTrue(report["events"], "no failure was scheduled")
        self.assertEqual(set(report["table"]), {"async", "sync", "async-chaos", "sync-chaos"})
        for key, row in report["table"].items():
            self.assertGreater(row["merged_steps"], 0, key)
            self.assertGreater(row["goodput"], 0, key)
            self.assertLess(row["goodput"], 1.5, key)
            self.assertLessEqual(row["goodput"], row["goodput_up"] + 1e-9, key)
        with open(os.path.join(out, "chaos.txt")) as f:
            self.assertIn("| async-chaos |", f.read())


if __name__ == "__main__":
    unittest.main()
