"""End to end: muloco-server and two muloco-worker processes on loopback train a small GPT
for several rounds; validation loss falls below 75% of its start, and both workers end
bit-identical to the server."""
import re
import unittest

from harness import TINY, ClusterTest


class EndToEnd(ClusterTest):
    def test_two_workers_train_and_end_identical(self):
        server, workers = self.run_cluster(2, *TINY, "--rounds=6", "--inner_steps=12")
        for w in workers:
            losses = self.val_losses(w)
            self.assertIn(0, losses)
            self.assertIn(6, losses)
            self.assertLess(losses[6], 0.75 * losses[0], losses)
        log = server.text()
        self.assertEqual(len(re.findall(r"round \d+ closed: 2 contributors", log)), 6, log)
        self.assertIn("0 unknown worker, 0 wrong round, 0 duplicate, 0 bad payload", log)


if __name__ == "__main__":
    unittest.main()
