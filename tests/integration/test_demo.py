"""The README's first command: scripts/demo.sh (what `make demo` runs) with the default preset,
shortened to 2 rounds of 3 steps, ends with its summary and both workers bit-identical to the
server's final parameters."""
import os
import re
import subprocess
import unittest

from harness import BUILD

DEMO = os.path.join(os.path.dirname(__file__), "../../scripts/demo.sh")


class Demo(unittest.TestCase):
    def test_demo_runs_to_its_summary(self):
        r = subprocess.run([DEMO, BUILD, "--rounds=2", "--inner_steps=3", "--eval_batches=1"], capture_output=True,
                           text=True, timeout=300)
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out[-3000:])
        self.assertIn("joined", out)
        self.assertIn("muloco-2bit", out)  # the embedded default preset
        self.assertIn("==== summary ====", out)
        self.assertIn("replicas: both workers are bit-identical to the server's final parameters", out)
        finals = dict((w, (float(a), float(b))) for w, a, b in re.findall(
            r"\[worker (worker-\d)\] final: val_loss ([0-9.]+) \(start ([0-9.]+)\) after 2 rounds", out))
        self.assertEqual(set(finals), {"worker-1", "worker-2"}, out[-3000:])
        for last, first in finals.values():
            self.assertLess(last, first)  # it trained


if __name__ == "__main__":
    unittest.main()
