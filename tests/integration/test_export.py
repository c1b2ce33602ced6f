"""The trained model leaves muloco: the server's --export file is safetensors that an
independent PyTorch GPT (tests/reference/torch_reference.py's gpt_loss, written from scratch)
loads by name, and its validation loss equals the one the worker logged for the same model
on the same tokens. The validation split is one window long, so every validation batch is
that window and Python needs none of the worker's sampling."""
import os
import re
import sys
import unittest

import numpy as np
import torch

from harness import TINY, ClusterTest
from muloco import safetensors

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../reference"))
from torch_reference import gpt_loss  # noqa: E402

CONTEXT = 32  # TINY's


class Export(ClusterTest):
    def test_safetensors_loads_into_pytorch_with_the_workers_loss(self):
        rng = np.random.default_rng(5)
        with open("/usr/share/games/fortunes/fortunes", "rb") as f:
            text = np.frombuffer(f.read(), dtype=np.uint8).astype("<u2")
        text.tofile(self.path("train.bin"))
        start = int(rng.integers(0, len(text) - CONTEXT - 1))
        window = text[start:start + CONTEXT + 1]
        window.tofile(self.path("val.bin"))  # exactly one window: every eval batch is it

        export = self.path("model.safetensors")
        server, addr = self.start_server(*TINY, "--rounds=3", "--inner_steps=5", f"--export={export}",
                                         f"--checkpoint_dir={self.path('ckpt')}",
                                         f"--save_final={self.path('server.bin')}")
        worker = self.start_worker(addr, f"--data={self.path('train.bin')}", f"--val_data={self.path('val.bin')}",
                                   f"--save_final={self.path('w.bin')}", "--name=w")
        self.assertEqual(worker.wait(timeout=300), 0, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        self.assertIn("exported the model at round 3", server.text())

        arrays, meta = safetensors.read(export)
        raw = b"".join(a.tobytes() for a in arrays.values())  # in the file's data order
        self.assertEqual(raw, self.read_bytes("server.bin"))  # layout order, nothing else
        tensors = {name: torch.tensor(a) for name, a in arrays.items()}
        self.assertEqual(self.read_bytes("w.bin"), raw)
        self.assertEqual(meta["format"], "muloco-gpt")
        self.assertEqual(meta["round"], "3")
        cfg = {k: int(meta[k]) for k in ("vocab_size", "n_layer", "n_head", "d_model", "context")}
        self.assertEqual(tensors["wte"].shape, (cfg["vocab_size"], cfg["d_model"]))
        self.assertEqual(tensors["h.0.attn.qkv.weight"].shape, (3 * cfg["d_model"], cfg["d_model"]))

        logged = float(re.search(r"final: val_loss ([\d.]+)", worker.text()).group(1))
        with torch.no_grad():
            loss = gpt_loss(tensors, cfg, torch.tensor(window.astype(np.int64)).unsqueeze(0)).item()
        print(f"PyTorch loss {loss:.6f}, worker logged {logged:.4f}")
        self.assertLess(abs(loss - logged), 1e-4 + 5e-5)  # the log prints 4 decimals

        # Checkpoints were written beside it (the export is refreshed with each of them).
        self.assertIn("checkpoint at round 3 written", server.text())


if __name__ == "__main__":
    unittest.main()
