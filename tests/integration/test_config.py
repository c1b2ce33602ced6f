"""One run configuration, resolved in one order: preset, then a --config file (RunConfig in
protobuf text format), then flags (given on the command line, in a --flagfile or through
--fromenv). --print_config writes what can be fed back; a resumed server applies the changes
that are safe mid-run (more rounds) and refuses the others by name."""
import os
import re
import subprocess
import unittest

from google.protobuf import text_format

import muloco.v1.muloco_pb2 as pb
from harness import SERVER_BIN, TINY, WORKER_BIN, ClusterTest


def run(*args, env=None):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, env=env)


def printed(*flags, env=None, binary=SERVER_BIN):
    out = run(binary, *flags, "--print_config", env=env)
    assert out.returncode == 0, out.stderr
    return text_format.Parse(out.stdout, pb.RunConfig())


class Config(ClusterTest):
    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def test_file_then_flags_in_one_order(self):
        conf = self.write("run.textproto", 'inner_steps: 7\nouter_momentum: 0.3\nmodel { n_layer: 3 }\n')
        c = printed(f"--config={conf}")
        self.assertEqual((c.inner_steps, round(c.outer_momentum, 6), c.model.n_layer), (7, 0.3, 3))
        self.assertEqual(c.preset, "muloco-2bit")  # the rest is the default preset's
        self.assertEqual(c.model.d_model, 64)
        self.assertEqual(printed(f"--config={conf}", "--inner_steps=5").inner_steps, 5)  # flags win
        flagfile = self.write("flags", f"--config={conf}\n--inner_steps=9\n")
        c = printed(f"--flagfile={flagfile}")
        self.assertEqual((c.inner_steps, c.model.n_layer), (9, 3))  # a --flagfile counts as given
        env = dict(os.environ, FLAGS_inner_steps="11")
        self.assertEqual(printed("--fromenv=inner_steps", env=env).inner_steps, 11)
        # A file naming a preset starts from it, unless --preset says otherwise.
        signmuon = self.write("signmuon.textproto", 'preset: "signmuon"\nouter_lr: 0.001\n')
        c = printed(f"--config={signmuon}")
        self.assertEqual((c.mode, c.inner_steps, round(c.outer_lr, 6)), ("signmuon", 1, 0.001))
        self.assertEqual(printed(f"--config={signmuon}", "--preset=diloco").mode, "diloco")
        # The worker's --baseline resolves the same way.
        self.assertEqual(printed(f"--config={conf}", binary=WORKER_BIN).inner_steps, 7)
        # Errors name the file and the place.
        bad = self.write("bad.textproto", "inner_steps: 7\nno_such_field: 1\n")
        out = run(SERVER_BIN, f"--config={bad}", "--print_config")
        self.assertEqual(out.returncode, 2)
        self.assertRegex(out.stderr, r"bad\.textproto: line 2")

    def test_print_config_feeds_back(self):
        first = run(SERVER_BIN, "--preset=signmuon", "--outer_momentum=0", "--rounds=33", "--print_config").stdout
        saved = self.write("saved.textproto", first)
        again = run(SERVER_BIN, f"--config={saved}", "--print_config").stdout
        self.assertEqual(again, first)
        # Every field is written, defaults too: zero values survive a trip over another preset.
        self.assertIn("outer_momentum: 0\n", first)
        self.assertEqual(run(SERVER_BIN, f"--config={saved}", "--preset=muloco", "--print_config").returncode, 0)

    def test_the_run_uses_the_file_and_the_flagfile(self):
        conf = self.write("run.textproto", "inner_steps: 7\nouter_momentum: 0.25\ntotal_rounds: 2\n")
        flagfile = self.write("server.flags", f"--config={conf}\n--outer_momentum=0.35\n")
        server, addr = self.start_server(*TINY, f"--flagfile={flagfile}", "--linger_s=1")
        worker = self.start_worker(addr, "--name=w")
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        # H from the file, momentum from the flagfile's flag (over the file), as logged.
        self.assertRegex(server.text(), r"H=7 rounds=2 .* m=0\.35 ")
        self.assertRegex(worker.text(), r"joined .* H=7 rounds=2 .* m=0\.35 ")

    def test_resume_applies_more_rounds_and_refuses_unsafe_changes(self):
        ckpt = f"--checkpoint_dir={self.path('ckpt')}"
        flags = [*TINY, "--inner_steps=3", ckpt, "--linger_s=1"]
        server, addr = self.start_server(*flags, "--rounds=2", name="s1")
        worker = self.start_worker(addr, "--name=w", name="w1")
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())

        # A changed model or H would silently be ignored before: now refused, by name.
        out = run(SERVER_BIN, "--listen=127.0.0.1:0", "--insecure", "--open_join", *flags, "--rounds=4",
                  "--inner_steps=7", "--n_layer=2")
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("--inner_steps", out.stderr)
        self.assertIn("--n_layer", out.stderr)
        refusal = [l for l in out.stderr.splitlines() if l.startswith("muloco-server:")][0]
        self.assertNotIn("--rounds", refusal.split("(")[0])  # more rounds is fine
        self.assertNotIn("applied", out.stderr)  # nothing applied from a refused resume
        # Fewer rounds than already done: refused too.
        out = run(SERVER_BIN, "--listen=127.0.0.1:0", "--insecure", "--open_join", *flags, "--rounds=1")
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("--rounds", out.stderr)

        # More rounds: the run continues from round 2 to 4.
        server, addr = self.start_server(*flags, "--rounds=4", name="s2")
        worker = self.start_worker(addr, "--name=w", name="w2")
        self.assertEqual(worker.wait(timeout=120), 0, worker.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        self.assertIn("resume: --rounds changed from the checkpoint's, applied", server.text())
        self.assertIn("resuming from checkpoint", server.text())
        self.assertEqual(re.findall(r"round (\d+) closed", server.text()), ["2", "3"])


if __name__ == "__main__":
    unittest.main()
