"""SignMuon with three worker processes: each step every worker sends the signs of its Muon
direction, 1 bit per parameter plus headers (measured from the bytes actually sent), the
server applies the majority vote, and the model trains (validation loss below 80% of its
start). MuLoCo (Muon inner, 2-bit both ways) trains end to end as well."""
import re
import unittest

from harness import ClusterTest

MODEL = ["--n_layer=1", "--n_head=2", "--d_model=32", "--context=32", "--batch_size=8", "--eval_batches=8"]


class SignMuon(ClusterTest):
    def test_three_workers_vote_with_one_bit_per_parameter(self):
        server, workers = self.run_cluster(3, *MODEL, "--preset=signmuon", "--rounds=120", "--eval_every=40",
                                           "--min_quorum=3")
        n = int(re.search(r"(\d+) parameters", server.text()).group(1))
        losses = self.val_losses(workers[0])
        self.assertLess(losses[120], 0.8 * losses[0], losses)
        closed = re.findall(r"round \d+ closed: 3 contributors, \d+ expected, up (\d+) bytes", server.text())
        self.assertEqual(len(closed), 120)
        per_push = {int(b) // 3 for b in closed}
        self.assertEqual(len(per_push), 1, per_push)  # every push has the same, exact size
        per_push = per_push.pop()
        # 1 bit per parameter; the rest is the 32-byte header, a 32-byte entry per tensor (13
        # for one layer), a 4-byte scale per chunk of 4096, and at most a byte of padding each.
        tensors = 2 + 8 * 1 + 3
        headers = 32 + 32 * tensors + 4 * (tensors + n // 4096) + tensors
        self.assertGreaterEqual(per_push * 8, n)
        self.assertLessEqual(per_push, n / 8 + headers, f"{per_push} bytes for {n} parameters")
        print(f"signmuon: {per_push} bytes per push for {n} parameters = {per_push * 8 / n:.3f} bits/parameter; "
              f"val loss {losses[0]:.3f} -> {losses[120]:.3f}")


class MuLoCo(ClusterTest):
    def test_muloco_two_bit_trains_end_to_end(self):
        _, workers = self.run_cluster(2, *MODEL, "--preset=muloco-2bit", "--rounds=8", "--inner_steps=10",
                                      "--min_quorum=2")
        losses = self.val_losses(workers[0])
        self.assertLess(losses[8], 0.75 * losses[0], losses)
        self.assertIn("muloco-2bit: diloco", workers[0].text())  # the preset reached the worker via Join
        self.assertIn("inner=muon", workers[0].text())


if __name__ == "__main__":
    unittest.main()
