"""The trained model leaves muloco: the server's --export file is safetensors that an
independent PyTorch model (tests/reference/torch_reference.py's gpt_loss and llama_loss,
written from scratch) loads by name, and its validation loss equals the one the worker logged
for the same model on the same tokens; for --arch=llama the names are Hugging Face's and the
metadata holds what a LlamaConfig needs. The validation split is one window long, so every
validation batch is that window and Python needs none of the worker's sampling."""
import os
import re
import subprocess
import sys
import unittest

import numpy as np
import torch

from harness import TINY, WORKER_BIN, ClusterTest
from muloco import safetensors

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../reference"))
from torch_reference import gpt_loss, llama_loss  # noqa: E402

CONTEXT = 32  # TINY's


class Export(ClusterTest):
    def train_and_export(self, *flags):
        """One worker, 3 rounds, then (tensors, metadata, the loss PyTorch computes on the
        validation window, the loss the worker logged, the worker's first and last)."""
        rng = np.random.default_rng(5)
        with open("/usr/share/games/fortunes/fortunes", "rb") as f:
            text = np.frombuffer(f.read(), dtype=np.uint8).astype("<u2")
        text.tofile(self.path("train.bin"))
        start = int(rng.integers(0, len(text) - CONTEXT - 1))
        self.window = text[start:start + CONTEXT + 1]
        self.window.tofile(self.path("val.bin"))  # exactly one window: every eval batch is it

        export = self.path("model.safetensors")
        server, addr = self.start_server(*TINY, *flags, "--rounds=3", "--inner_steps=5", f"--export={export}",
                                         f"--checkpoint_dir={self.path('ckpt')}",
                                         f"--save_final={self.path('server.bin')}")
        worker = self.start_worker(addr, f"--data={self.path('train.bin')}", f"--val_data={self.path('val.bin')}",
                                   f"--save_final={self.path('w.bin')}", "--name=w")
        self.assertEqual(worker.wait(timeout=300), 0, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        self.assertIn("exported the model at round 3", server.text())
        # Checkpoints were written beside it (the export is refreshed with each of them).
        self.assertIn("checkpoint at round 3 written", server.text())

        arrays, meta = safetensors.read(export)
        raw = b"".join(a.tobytes() for a in arrays.values())  # in the file's data order
        self.assertEqual(raw, self.read_bytes("server.bin"))  # layout order, nothing else
        self.assertEqual(self.read_bytes("w.bin"), raw)
        self.assertEqual(meta["round"], "3")
        m = re.search(r"final: val_loss ([\d.]+) \(start ([\d.]+)\)", worker.text())
        return {name: torch.tensor(a) for name, a in arrays.items()}, meta, float(m.group(1)), float(m.group(2))

    def check_loss(self, loss_fn, tensors, cfg, logged):
        with torch.no_grad():
            loss = loss_fn(tensors, cfg, torch.tensor(self.window.astype(np.int64)).unsqueeze(0)).item()
        print(f"PyTorch loss {loss:.6f}, worker logged {logged:.4f}")
        self.assertLess(abs(loss - logged), 1e-4 + 5e-5)  # the log prints 4 decimals

    def test_safetensors_loads_into_pytorch_with_the_workers_loss(self):
        tensors, meta, logged, _ = self.train_and_export()
        self.assertEqual(meta["format"], "muloco-gpt")
        cfg = {k: int(meta[k]) for k in ("vocab_size", "n_layer", "n_head", "d_model", "context")}
        self.assertEqual(tensors["wte"].shape, (cfg["vocab_size"], cfg["d_model"]))
        self.assertEqual(tensors["h.0.attn.qkv.weight"].shape, (3 * cfg["d_model"], cfg["d_model"]))
        self.check_loss(gpt_loss, tensors, cfg, logged)
        # Greedy sampling from the export continues the prompt by 30 bytes.
        r = subprocess.run([WORKER_BIN, f"--generate={self.path('model.safetensors')}", "--prompt=Q: ",
                            "--sample_tokens=30", "--temperature=0"], capture_output=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(b"Q: "), r.stdout)
        self.assertEqual(len(r.stdout), 3 + 30 + 1)  # the prompt, 30 bytes, a newline

    def test_a_llama_export_has_hugging_face_names_and_the_workers_loss(self):
        # Grouped-query attention (2 heads, 1 key/value head), untied head: every LLaMA part.
        tensors, meta, logged, first = self.train_and_export("--arch=llama", "--n_kv_head=1")
        self.assertEqual(meta["format"], "muloco-llama")
        cfg = {k: int(meta[k]) for k in ("vocab_size", "n_layer", "n_head", "n_kv_head", "d_model", "ffn_dim")}
        self.assertEqual((cfg["n_kv_head"], cfg["ffn_dim"]), (1, 88))  # 8/3 * 32 = 85.3, up to a multiple of 8
        self.assertEqual((float(meta["rms_norm_eps"]), float(meta["rope_theta"]), meta["tie_embeddings"]),
                         (1e-5, 10000.0, "false"))
        self.assertEqual(tensors["model.layers.0.self_attn.k_proj.weight"].shape, (16, 32))  # one head of 16
        self.assertEqual(tensors["model.layers.0.mlp.gate_proj.weight"].shape, (88, 32))
        self.assertIn("lm_head.weight", tensors)
        self.check_loss(llama_loss, tensors, cfg, logged)
        self.assertLess(logged, 0.9 * first)  # it learned: 15 steps at lr 1e-2 on bytes


if __name__ == "__main__":
    unittest.main()
