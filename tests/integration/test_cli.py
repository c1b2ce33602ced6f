"""The binaries' command lines: --help lists every flag with its default, bad flags and bad
configurations exit with a clear message, and a worker without a server gives up cleanly."""
import subprocess
import unittest

from harness import SERVER_BIN, TINY, WORKER_BIN

RUN_CONFIG_FLAGS = ["preset", "mode", "inner_optimizer", "muon_lr", "muon_scale", "ns_steps", "ef_beta",
                    "signmuon_polar", "vocab_size", "n_layer", "n_head", "d_model", "context", "inner_steps", "rounds",
                    "batch_size", "inner_lr", "warmup_steps", "weight_decay", "muon_weight_decay", "grad_clip", "uplink_codec",
                    "downlink_codec", "eval_every"]


def run(*args, timeout=60):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


class Cli(unittest.TestCase):
    def test_help_lists_every_flag_with_default(self):
        server = {"listen", "port_file", "min_quorum", "round_timeout_s", "heartbeat_timeout_s", "outer_lr",
                  "outer_momentum", "nesterov", "chunk_bytes", "linger_s", "save_final", "checkpoint_dir",
                  "checkpoint_every", "keep_checkpoints", "insecure", "tls_cert", "tls_key", "tls_client_ca",
                  "join_tokens", "open_join", "robust", "max_workers", "max_workers_per_token",
                  "max_joins_per_minute", "max_joins_per_token_per_minute", "max_streams_per_worker",
                  "max_push_attempts_per_round", "max_push_chunks", "idle_timeout_s", "max_await_s",
                  "transport_memory_mb", "max_threads", *RUN_CONFIG_FLAGS}
        worker = {"server", "name", "data", "val_data", "heartbeat_s", "connect_timeout_s", "save_final",
                  "threads", "baseline", "retry_timeout_s", "leave_after", "insecure", "tls_ca", "tls_cert", "tls_key",
                  "tls_server_name", "token_file", "device", "dtype", *RUN_CONFIG_FLAGS}
        for binary, flags in ((SERVER_BIN, server), (WORKER_BIN, worker)):
            out = run(binary, "--help")
            self.assertEqual(out.returncode, 0, out.stderr)
            text = out.stdout + out.stderr
            self.assertEqual(text.count("DiLoCo"), 1)  # the program's line once, no build paths
            self.assertNotIn("/work/", text)
            for group in ("Run configuration", "Security:", "Operation:"):
                self.assertIn(group, text)
            for flag in flags:
                self.assertRegex(text, rf"(?s)--{flag} \(.*?\);\s+default: ", f"{binary} --help lacks --{flag}")

    def test_help_shows_the_chosen_presets_values(self):
        for preset, h in (("muloco-2bit", "20"), ("signmuon", "1")):
            text = run(SERVER_BIN, f"--preset={preset}", "--help").stdout
            self.assertRegex(text, rf"--inner_steps \(.*?\);\s+default: {h}\n", preset)

    def test_bad_flags_and_configs_fail_clearly(self):
        out = run(SERVER_BIN, "--no_such_flag=1")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("no_such_flag", out.stderr)
        out = run(SERVER_BIN, "--n_head=3")
        self.assertEqual(out.returncode, 2)
        self.assertIn("divisible by n_head", out.stderr)
        out = run(SERVER_BIN, "--uplink_codec=gzip")
        self.assertEqual(out.returncode, 2)
        self.assertIn("unknown codec", out.stderr)
        out = run(SERVER_BIN, "--outer_momentum=1.5")
        self.assertEqual(out.returncode, 2)
        out = run(SERVER_BIN, "--preset=nope")
        self.assertEqual(out.returncode, 2)
        self.assertIn("unknown preset", out.stderr)
        out = run(SERVER_BIN, "--preset=signmuon", "--uplink_codec=quant:bits=2")
        self.assertEqual(out.returncode, 2)
        self.assertIn("signmuon needs", out.stderr)
        out = run(WORKER_BIN, "--baseline", "--data=/nonexistent")
        self.assertEqual(out.returncode, 1)
        self.assertIn("/nonexistent", out.stderr)

    def test_worker_devices(self):
        """--device=auto trains where it can and says so; --device=cuda without a usable GPU and
        bad spellings fail with the reason before anything starts."""
        out = run(WORKER_BIN, "--baseline", "--rounds=1", "--inner_steps=2", "--device=auto", *TINY, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        log = out.stdout + out.stderr
        gpu = "device cuda:0" in log
        if not gpu:  # this machine: CPU LibTorch or no GPU
            self.assertRegex(log, r"--device=auto: training on the CPU \(.+\)")
            self.assertIn("device cpu", log)
            out = run(WORKER_BIN, "--device=cuda", "--server=127.0.0.1:1", "--connect_timeout_s=1")
            self.assertEqual(out.returncode, 2)
            self.assertRegex(out.stderr, r"--device=cuda: .+; use --device=cpu or auto")
        for bad, why in (("--device=gpu", "must be cpu, cuda, cuda:N or auto"), ("--device=cuda:x", "not cuda:N"),
                         ("--dtype=fp16", "fp32 or bf16")):
            out = run(WORKER_BIN, bad, "--server=127.0.0.1:1", "--connect_timeout_s=1")
            self.assertEqual(out.returncode, 2, bad)
            self.assertIn(why, out.stderr, bad)
        if not gpu:
            out = run(WORKER_BIN, "--device=cpu", "--dtype=bf16", "--server=127.0.0.1:1", "--connect_timeout_s=1")
            self.assertEqual(out.returncode, 2)
            self.assertIn("bf16 needs a CUDA device", out.stderr)

    def test_worker_without_server_gives_up(self):
        out = run(WORKER_BIN, "--server=127.0.0.1:1", "--connect_timeout_s=1")
        self.assertEqual(out.returncode, 1)
        self.assertIn("cannot join", out.stderr)


if __name__ == "__main__":
    unittest.main()
