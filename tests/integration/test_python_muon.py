"""muloco.Muon (the Python package's optimizer over the project's C++ Newton-Schulz) against
tests/reference/torch_reference.py's Muon, written from Keller Jordan's description: the same
parameters after three steps, for both scale rules, with and without Nesterov."""
import json
import os
import sys
import tempfile
import unittest

import numpy as np
import torch

import muloco

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import torch_reference  # noqa: E402


class PythonMuon(unittest.TestCase):
    def check(self, scale, nesterov):
        shapes, steps = [(8, 5), (4, 12), (6, 6)], 3
        rng = np.random.default_rng(11)
        params = rng.normal(0, 1, sum(r * c for r, c in shapes)).astype(np.float32)
        grads = rng.normal(0, 1, (steps, params.size)).astype(np.float32)
        cfg = dict(shapes=shapes, steps=steps, momentum=0.95, lr=0.02, weight_decay=0.1, nesterov=nesterov,
                   ns_steps=5, coeffs=[3.4445, -4.7750, 2.0315], scale=scale)
        with tempfile.TemporaryDirectory() as d:
            params.tofile(f"{d}/params.f32")
            grads.tofile(f"{d}/grads.f32")
            with open(f"{d}/config.json", "w") as f:
                json.dump(cfg, f)
            torch_reference.muon(d, cfg)
            expected = np.fromfile(f"{d}/expected.f32", dtype=np.float32)
        ps, off = [], 0
        for r, c in shapes:
            ps.append(torch.nn.Parameter(torch.tensor(params[off:off + r * c].reshape(r, c))))
            off += r * c
        opt = muloco.Muon(ps, lr=0.02, momentum=0.95, nesterov=nesterov, ns_steps=5, weight_decay=0.1, scale=scale)
        for s in range(steps):
            off = 0
            for p in ps:
                p.grad = torch.tensor(grads[s, off:off + p.numel()].reshape(p.shape))
                off += p.numel()
            opt.step()
        got = np.concatenate([p.detach().numpy().ravel() for p in ps])
        moved = np.abs(expected - params).max()
        self.assertGreater(moved, 0.01)  # the steps did something
        self.assertLess(np.abs(got - expected).max(), 1e-5 * max(1.0, moved))

    def test_shape_scale_with_nesterov(self):
        self.check("shape", True)

    def test_adamw_scale_without_nesterov(self):
        self.check("adamw", False)

    def test_refuses_what_it_cannot_do(self):
        with self.assertRaises(ValueError):
            muloco.Muon([torch.nn.Parameter(torch.zeros(3))], scale="spectral")
        p = torch.nn.Parameter(torch.zeros(3))
        p.grad = torch.ones(3)
        with self.assertRaises(ValueError):
            muloco.Muon([p]).step()


if __name__ == "__main__":
    unittest.main()
