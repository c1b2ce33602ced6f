"""A worker that joins after round 2 fetches the model, catches up and contributes to later
rounds, ending bit-identical to the server."""
import re
import unittest

from harness import TINY, ClusterTest


class LateJoin(ClusterTest):
    def test_joiner_after_round_two_contributes(self):
        server, addr = self.start_server(*TINY, "--rounds=20", "--inner_steps=30",
                                         f"--save_final={self.path('server.bin')}")
        early = self.start_worker(addr, f"--save_final={self.path('early.bin')}", "--name=early", name="early")
        self.wait_for(server, r"round 2 closed", timeout=120)
        late = self.start_worker(addr, f"--save_final={self.path('late.bin')}", "--name=late", name="late")
        joined = int(self.wait_for(late, r"joined .* at round (\d+)", timeout=60).group(1))
        self.assertGreaterEqual(joined, 3)
        self.assertEqual(late.wait(timeout=300), 0, late.text())
        self.assertEqual(early.wait(timeout=60), 0, early.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())

        closed = {int(r): int(c) for r, c in re.findall(r"round (\d+) closed: (\d+) contributors", server.text())}
        self.assertEqual(sorted(closed), list(range(20)))
        self.assertTrue(all(closed[r] == 1 for r in range(3)), closed)
        self.assertGreaterEqual(sum(1 for r in closed if closed[r] == 2), 2, closed)
        contributed = re.findall(r"round (\d+): train_loss", late.text())
        self.assertGreaterEqual(len(contributed), 2)
        self.assertEqual(self.read_bytes("late.bin"), self.read_bytes("server.bin"))
        self.assertEqual(self.read_bytes("early.bin"), self.read_bytes("server.bin"))


if __name__ == "__main__":
    unittest.main()
