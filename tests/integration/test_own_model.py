"""A user's own model as the run's (muloco-server --init_model): the server takes the
safetensors file's tensor names, shapes and values as the model, with optimizer groups by
its rule (--adamw_params), sends the layout in Join, refuses a joining model that differs
(naming the tensor), keeps the layout through a checkpoint, and exports the user's names.
The built-in C++ worker, which trains only the GPT, refuses such a run and leaves."""
import os
import signal
import unittest

import grpc
import numpy as np

import muloco.v1.muloco_pb2 as pb
from harness import SERVER_BIN, ClusterTest, Proc
from peer import Peer
from muloco import safetensors

# A small LLaMA-style model in Hugging Face's names, not the GPT's, one tensor in fp16.
RNG = np.random.default_rng(7)
MODEL = [
    ("model.embed_tokens.weight", RNG.normal(0, 0.02, (64, 16)).astype(np.float32)),
    ("model.layers.0.input_layernorm.weight", np.ones(16, np.float32)),
    ("model.layers.0.self_attn.q_proj.weight", RNG.normal(0, 0.02, (16, 16)).astype(np.float32)),
    ("model.layers.0.mlp.up_proj.weight", RNG.normal(0, 0.02, (32, 16)).astype(np.float16)),
    ("model.norm.weight", np.ones(16, np.float32)),
    ("lm_head.weight", RNG.normal(0, 0.02, (64, 16)).astype(np.float32)),
]
GROUPS = {"model.embed_tokens.weight": pb.TENSOR_GROUP_ADAMW, "lm_head.weight": pb.TENSOR_GROUP_ADAMW,
          "model.layers.0.input_layernorm.weight": pb.TENSOR_GROUP_ADAMW_NO_DECAY,
          "model.norm.weight": pb.TENSOR_GROUP_ADAMW_NO_DECAY,
          "model.layers.0.self_attn.q_proj.weight": pb.TENSOR_GROUP_MUON,
          "model.layers.0.mlp.up_proj.weight": pb.TENSOR_GROUP_MUON}
SHAPES = [(name, a.shape) for name, a in MODEL]


class OwnModel(ClusterTest):
    def setUp(self):
        super().setUp()
        self.init = self.path("init.safetensors")
        safetensors.write(self.init, MODEL, {"note": "made by a test"})

    def serve(self, *flags, name="server"):
        return self.start_server(f"--init_model={self.init}", "--rounds=3", "--preset=muloco", *flags, name=name)

    def test_the_run_is_the_files_model(self):
        server, addr = self.serve(f"--export={self.path('out.safetensors')}")
        self.assertIn("6 tensors of --init_model", server.text())
        peer = Peer(addr)
        # Another order holds the same tensors: fine.
        r = peer.join(layout=list(reversed(SHAPES)))
        self.assertEqual([t.name for t in r.layout.tensors], [n for n, _ in MODEL])  # the file's order
        self.assertEqual([list(t.shape) for t in r.layout.tensors], [list(a.shape) for _, a in MODEL])
        self.assertEqual({t.name: t.group for t in r.layout.tensors}, GROUPS)
        self.assertEqual(r.num_params, sum(a.size for _, a in MODEL))
        theta0 = np.frombuffer(peer.fetch(), dtype="<f4")
        want = np.concatenate([a.astype(np.float32).ravel() for _, a in MODEL])
        self.assertTrue(np.array_equal(theta0, want), "θ₀ is the file's values, fp16 widened exactly")
        peer.leave()
        server.kill(signal.SIGTERM)
        self.assertEqual(server.wait(timeout=30), 0, server.text())
        tensors, meta = safetensors.read(self.path("out.safetensors"))
        self.assertEqual(set(tensors), {n for n, _ in MODEL})
        self.assertEqual(meta["format"], "muloco")
        self.assertNotIn("n_layer", meta)
        for n, a in MODEL:
            self.assertTrue(np.array_equal(tensors[n], a.astype(np.float32)), n)

    def test_a_different_model_is_refused_at_join_naming_the_tensor(self):
        _, addr = self.serve()
        cases = {
            "shape": ([(n, (32, 17) if "up_proj" in n else s) for n, s in SHAPES],
                      "tensor model.layers.0.mlp.up_proj.weight: shape [32, 17] here, [32, 16] in the run"),
            "missing": (SHAPES[:-1], "tensor lm_head.weight [64, 16] of the run is missing here"),
            "extra": (SHAPES + [("model.layers.1.mlp.up_proj.weight", (32, 16))],
                      "tensor model.layers.1.mlp.up_proj.weight is not in the run's model"),
        }
        for what, (layout, message) in cases.items():
            with self.assertRaises(grpc.RpcError, msg=what) as e:
                Peer(addr).join(layout=layout)
            self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION, what)
            self.assertIn(message, e.exception.details(), what)
        with self.assertRaises(grpc.RpcError) as e:  # a malformed layout
            Peer(addr).join(layout=[("a", (4,)), ("a", (4,))])
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        r = Peer(addr).join(layout=SHAPES)  # the refusals held no places
        self.assertGreater(r.worker_id, 0)

    def test_the_builtin_worker_refuses_a_run_that_is_not_its_gpt(self):
        server, addr = self.serve("--heartbeat_timeout_s=600")
        w = self.start_worker(addr, "--name=cxx")
        self.assertEqual(w.wait(timeout=120), 1, w.text())
        self.assertIn("not the built-in model", w.text())
        self.assertIn("model.embed_tokens.weight", w.text())
        self.wait_for(server, r"worker \d+ left; 0 live", timeout=30)  # it left: never waited for

    def test_the_rule_and_the_layout_hold_through_a_checkpoint(self):
        ckpt = self.path("ckpt")
        server, addr = self.serve(f"--checkpoint_dir={ckpt}", "--adamw_params=q_proj|embed")
        r = Peer(addr).join(layout=SHAPES)
        self.assertEqual({t.name: t.group for t in r.layout.tensors}["model.layers.0.self_attn.q_proj.weight"],
                         pb.TENSOR_GROUP_ADAMW)
        server.kill(signal.SIGTERM)
        self.assertEqual(server.wait(timeout=30), 0, server.text())
        os.remove(self.init)  # the checkpoint alone holds the model now
        again, addr = self.start_server(f"--checkpoint_dir={ckpt}", "--rounds=3", "--preset=muloco",
                                        "--adamw_params=q_proj|embed", name="again")
        r = Peer(addr).join(layout=SHAPES)
        self.assertEqual([t.name for t in r.layout.tensors], [n for n, _ in MODEL])
        self.assertEqual(r.layout.tensors[2].group, pb.TENSOR_GROUP_ADAMW)
        again.kill(signal.SIGTERM)
        again.wait(timeout=30)
        # Another rule would regroup the run's tensors mid-run: refused, naming the flag.
        p = Proc([SERVER_BIN, "--listen=127.0.0.1:0", "--insecure", "--open_join", f"--checkpoint_dir={ckpt}",
                  "--rounds=3", "--preset=muloco"], self.path("third.log"))
        self.procs.append(p)
        self.assertEqual(p.wait(timeout=30), 2, p.text())
        self.assertIn("--adamw_params", p.text())

    def test_a_bad_file_is_refused_with_its_reason(self):
        with open(self.init, "r+b") as f:
            f.truncate(100)
        p = Proc([SERVER_BIN, "--listen=127.0.0.1:0", "--insecure", "--open_join", f"--init_model={self.init}"],
                 self.path("bad.log"))
        self.procs.append(p)
        self.assertEqual(p.wait(timeout=30), 2, p.text())
        self.assertIn("--init_model=", p.text())
        self.assertIn("header length", p.text())


if __name__ == "__main__":
    unittest.main()
