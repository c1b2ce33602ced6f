"""End to end with compression both ways: the default 2-bit codec (Lloyd–Max bins with a
centroid table per chunk of 512 values) with error feedback on the uplink, and the same
codec on the downlink (server-side feedback). AdamW inner (the diloco preset): issue 3's
setting.
The same run uncompressed is the reference: final validation loss within 2% of it, with at
least 12x fewer payload bytes up and down, and replicas still bit-identical to the server.
min_quorum 2 and join-order data seeds make both runs deterministic (both workers are in
every round; worker k reads the data order of data_seed + k)."""
import re
import unittest

from harness import TINY, ClusterTest

# Inner lr 3e-3 (the preset's), not the harness's 1e-2: at 1e-2 this tiny model's training is
# chaotic, and any perturbation of the updates, even bf16 rounding, moved the final loss by
# up to 4% either way. At 3e-3, bf16 moves it by under 0.05%, and 2-bit landed within
# -0.24% to +1.36% of dense over data seeds 1-6 (bench/README.md), measured when the diloco
# preset's cosine floor was 0.1. With its constant inner lr (2026-12-05) it is +0.23% on this seed.
RUN = [*TINY, "--preset=diloco", "--inner_lr=3e-3", "--batch_size=32", "--eval_batches=16", "--rounds=25",
       "--inner_steps=12", "--outer_momentum=0.6", "--min_quorum=2", "--eval_every=5"]
COMPRESSED = ["--uplink_codec=lloyd:bits=2,chunk=512", "--downlink_codec=lloyd:bits=2,chunk=512"]


class Compression(ClusterTest):
    def final_of(self, tag, *flags):
        """(final loss, start loss, bytes up, bytes down) of worker 0 in a two-worker run."""
        _, workers = self.run_cluster(2, *RUN, *flags, tag=tag + "-")
        final = re.search(r"final: val_loss ([\d.]+) \(start ([\d.]+)\) after 25 rounds; up (\d+) bytes, down (\d+)",
                          workers[0].text())
        self.assertIsNotNone(final, workers[0].text())
        return float(final.group(1)), float(final.group(2)), int(final.group(3)), int(final.group(4))

    def test_two_bit_both_ways_is_near_lossless_with_12x_less_traffic(self):
        dense_loss, start, dense_up, dense_down = self.final_of(
            "dense", "--uplink_codec=dense-fp32", "--downlink_codec=dense-fp32")
        loss, start2, up, down = self.final_of("q2", *COMPRESSED)
        print(f"dense {dense_loss:.4f}  2-bit {loss:.4f} ({100 * (loss / dense_loss - 1):+.2f}%)  "
              f"up {dense_up / up:.1f}x  down {dense_down / down:.1f}x smaller")
        self.assertEqual(start, start2)
        self.assertLess(dense_loss, 0.6 * start)  # the reference really trained
        self.assertLessEqual(loss, 1.02 * dense_loss)
        self.assertGreaterEqual(dense_up / up, 12)
        self.assertGreaterEqual(dense_down / down, 12)


if __name__ == "__main__":
    unittest.main()
