"""The frontier benchmark's smoke variant (bench/frontier.py --smoke --seeds 2): every method
runs with real server and worker processes for two tiny rounds, once per seed; losses are
finite and fall, every payload a worker logged has the size an independent computation of
the wire format gives (the script fails otherwise), each row's loss is the mean of its two
seeds, which start from different models, and the table, CSVs and plots are written; the
llama-tiny setting tokenizes the corpus and trains a LLaMA with exact payload sizes."""
import csv
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from harness import BUILD

HERE = os.path.dirname(os.path.abspath(__file__))
FRONTIER = os.path.normpath(os.path.join(HERE, "../../bench/frontier.py"))
sys.path.insert(0, os.path.dirname(FRONTIER))
import frontier  # noqa: E402


class Frontier(unittest.TestCase):
    def test_wire_sizes_by_hand(self):
        # The demo model: 21 tensors, 135,808 parameters, 640 of them in vectors.
        shapes = frontier.tensor_shapes(256, 2, 64, 64)
        self.assertEqual((len(shapes), sum(n for _, n, _ in shapes)), (21, 135808))
        self.assertEqual(sum(n for _, n, v in shapes if v), 640)
        overhead = 32 + 21 * 32
        self.assertEqual(frontier.payload_bytes("dense-fp32", shapes), overhead + 4 * 135808)
        # lloyd 2-bit, chunk 512: vectors dense; per matrix 4 floats per chunk and 2 bits per element.
        matrices = [n for _, n, v in shapes if not v]
        lloyd = sum(-(-n // 512) * 16 + n // 4 for n in matrices)
        self.assertEqual(frontier.payload_bytes("lloyd:bits=2,chunk=512", shapes), overhead + 4 * 640 + lloyd)
        # top-k 32 of 4096 with 2-bit values: 12-bit indices, a 4-float table per segment.
        kept = [(n // 4096) * 32 + min(32, n % 4096) for n in matrices]
        topk = sum((k * 12 + 7) // 8 + 16 + (2 * k + 7) // 8 for k in kept)
        self.assertEqual(frontier.payload_bytes("topk:chunk=4096,k=32,bits=2", shapes), overhead + 4 * 640 + topk)
        # 1-bit Lloyd on a seeded 3808 of each 4096 (keep 0.93), vectors too: per segment a u32
        # seed, then 2 floats and 1 bit per kept element for each chunk of 3808 kept.
        kept = [(n // 4096) * 3808 + min(3808, n % 4096) for _, n, _ in shapes]
        keep = sum(4 + -(-k // 3808) * 8 + (k + 7) // 8 for k in kept)
        self.assertEqual(frontier.payload_bytes("lloyd:bits=1,chunk=4096,keep=0.93,vectors=same", shapes), overhead + keep)

    def test_every_method_runs_and_its_bytes_are_exact(self):
        out = tempfile.mkdtemp(prefix="muloco_frontier_test_")
        try:
            r = subprocess.run([sys.executable, FRONTIER, "--smoke", "--seeds=2", f"--build={BUILD}", f"--out={out}",
                                f"--logs={os.path.join(out, 'logs')}"], capture_output=True, text=True, timeout=500)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            with open(os.path.join(out, "frontier.csv")) as f:
                rows = {row["method"]: row for row in csv.DictReader(f)}
            self.assertEqual(set(rows), {m[0] for m in frontier.METHODS})
            dense = [float(v) for v in rows["muloco"]["seeds"].split("/")]  # each row's seeds are paired with these
            for name, row in rows.items():
                final, start = float(row["final_val_loss"]), float(row["start_val_loss"])
                self.assertTrue(math.isfinite(final), name)
                self.assertLess(final, start, name)
                seeds = [float(v) for v in row["seeds"].split("/")]
                self.assertEqual(len(seeds), 2, name)
                self.assertAlmostEqual(final, sum(seeds) / 2, delta=1e-4, msg=name)
                self.assertNotEqual(seeds[0], seeds[1], name)  # another initial model and data order
                gaps = [float(g.rstrip("%")) for g in row["vs_muloco_per_seed"].split("/")]
                self.assertEqual(len(gaps), 2, name)
                for gap, v, d in zip(gaps, seeds, dense):  # paired: each seed against dense's same seed
                    self.assertAlmostEqual(gap, 100 * (v / d - 1), delta=0.006, msg=name)
                params = int(row["params"])
                up = frontier.payload_bytes(row["up_codec"], frontier.tensor_shapes(256, 2, 64, 64))
                self.assertEqual(int(row["bytes_up"]), up * int(row["payloads"]), name)
                self.assertAlmostEqual(float(row["bits_up"]), 8 * up / params, places=6)
            # Dense rounds carry 32 bits per parameter plus the header and segment table.
            self.assertAlmostEqual(float(rows["diloco"]["bits_up"]), 32 + 8 * 704 / 135808, places=6)
            self.assertEqual(int(rows["dp"]["payloads"]), 4)        # H = 1: one payload per step
            self.assertEqual(int(rows["diloco"]["payloads"]), 2)
            self.assertIn("DiLoCo dense", open(os.path.join(out, "frontier.txt")).read())
            with open(os.path.join(out, "frontier_curves.csv")) as f:
                curves = list(csv.DictReader(f))
            self.assertEqual({c["method"] for c in curves}, set(rows))
            for png in ("frontier_bytes.png", "frontier_rounds.png"):  # gnuplot-nox: scripts/install-deps.sh
                with open(os.path.join(out, png), "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def test_a_llama_setting_on_tokens(self):
        # --setting tokenizes the corpus once and runs the LLaMA on it; its payloads are checked
        # against the LLaMA layout computed here (scripts/gpt_layout.py's llama_shapes).
        out = tempfile.mkdtemp(prefix="muloco_frontier_llama_")
        try:
            r = subprocess.run([sys.executable, FRONTIER, "--smoke", "--setting=llama-tiny", "--methods=muloco,muloco-2bit",
                                f"--build={BUILD}", f"--out={out}"], capture_output=True, text=True, timeout=500)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            self.assertTrue(os.path.exists(os.path.join(out, "shards", "tokenizer.model")))
            with open(os.path.join(out, "frontier.csv")) as f:
                rows = {row["method"]: row for row in csv.DictReader(f)}
            shapes = frontier.llama_shapes(512, 1, 32, 2, 2, 88)  # ffn: 8/3 * 32 up to a multiple of 8
            self.assertEqual(sum(n for _, n, _ in shapes), 45408)
            for name in ("muloco", "muloco-2bit"):
                self.assertEqual(int(rows[name]["params"]), 45408, name)
                up = frontier.payload_bytes(rows[name]["up_codec"], shapes)
                self.assertEqual(int(rows[name]["bytes_up"]), up * int(rows[name]["payloads"]), name)
                self.assertLess(float(rows[name]["final_val_loss"]), float(rows[name]["start_val_loss"]), name)
        finally:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
