"""Real tokens: muloco-prepare trains a SentencePiece BPE tokenizer on Debian's fortunes and
writes token shards (common/token_shards.h); a LLaMA run on them (the server naming the
tokenizer) trains with two workers, every replica the server's bit for bit and the validation
loss falling; a worker whose shards come from another tokenizer, or that brings bytes, is
refused with the reason, and the run goes on without it; scripts/sample.sh turns the export
and a prompt into text."""
import json
import os
import re
import struct
import subprocess
import unittest

from harness import BUILD, TINY, WORKER_BIN, ClusterTest

PREPARE = os.path.join(BUILD, "muloco-prepare")
SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "sample.sh")


class Tokens(ClusterTest):
    def prepare(self, name, pieces, *flags):
        out = self.path(name)
        r = subprocess.run([PREPARE, f"--out={out}", f"--pieces={pieces}", "--shard_tokens=400000", *flags],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        m = re.search(r"--vocab_size=(\d+) --tokenizer_checksum=(\d+)", r.stdout)
        return out, int(m.group(1)), int(m.group(2))

    def header(self, path):
        with open(path, "rb") as f:
            magic, vocab, _, count, tokenizer = struct.unpack("<8sIIQQ", f.read(32))
        self.assertEqual(magic, b"MULOCOT1")
        self.assertEqual(os.path.getsize(path), 32 + 2 * count)
        return vocab, count, tokenizer

    def test_a_llama_run_on_sentencepiece_tokens(self):
        shards, vocab, checksum = self.prepare("shards", 512)
        # Another tokenizer of the same size (trained on one file of the corpus), and another size.
        other, _, other_checksum = self.prepare("other", 512, "--text=/usr/share/games/fortunes/fortunes")
        smaller, _, _ = self.prepare("smaller", 400)
        self.assertEqual(vocab, 512)
        self.assertNotEqual(checksum, other_checksum)
        names = sorted(os.listdir(shards))
        self.assertIn("tokenizer.model", names)
        self.assertIn("val.bin", names)
        train = [n for n in names if n.startswith("train-")]
        self.assertGreaterEqual(len(train), 2)  # ~1M tokens in shards of 400,000
        for n in train + ["val.bin"]:
            self.assertEqual(self.header(os.path.join(shards, n))[::2], (512, checksum))

        server, addr = self.start_server(*TINY, "--arch=llama", f"--vocab_size={vocab}",
                                         f"--tokenizer_checksum={checksum}", "--rounds=4", "--inner_steps=10",
                                         "--min_quorum=2", f"--save_final={self.path('server.bin')}",
                                         f"--export={self.path('model.safetensors')}")
        # Refused before they push: another tokenizer's shards, another vocabulary's, and bytes.
        for name, data, reason in (("wrong", other, f"tokenized by tokenizer {other_checksum}, not the run's {checksum}"),
                                   ("smaller", smaller, "tokenized for a vocabulary of 400; the run's is 512"),
                                   ("bytes", "", "give --data the directory muloco-prepare wrote")):
            w = self.start_worker(addr, f"--name={name}", *([f"--data={data}"] if data else []), name=name)
            self.assertNotEqual(w.wait(timeout=120), 0, w.text())
            self.assertIn(reason, w.text())
        workers = [self.start_worker(addr, f"--data={shards}", f"--name=w{i}", f"--save_final={self.path(f'w{i}.bin')}",
                                     name=f"w{i}") for i in range(2)]
        for w in workers:
            self.assertEqual(w.wait(timeout=300), 0, w.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        final = self.read_bytes("server.bin")
        for i in range(2):
            self.assertEqual(self.read_bytes(f"w{i}.bin"), final)
        self.assertIn("LLaMA(vocab 512", workers[0].text())
        losses = self.val_losses(workers[0])
        print(f"val_loss on 512 BPE pieces: {losses}")
        self.assertLess(losses[4], losses[0] - 0.3)  # from ln(512) = 6.24

        # The model speaks: one command from the export to text, the same text for the same seed.
        sample = [subprocess.run([SAMPLE, self.path("model.safetensors"), shards, "Q: Why"], capture_output=True,
                                 text=True, timeout=120, env=dict(os.environ, BUILD=BUILD, TOKENS="40"))
                  for _ in range(2)]
        self.assertEqual(sample[0].returncode, 0, sample[0].stderr)
        print(f"sample: {sample[0].stdout!r}")
        self.assertTrue(sample[0].stdout.startswith("Q: Why"), sample[0].stdout)
        self.assertGreater(len(sample[0].stdout), len("Q: Why") + 40)  # 40 pieces of 1+ bytes each
        self.assertEqual(sample[0].stdout, sample[1].stdout)
        # The export names its tokenizer; a prompt of another tokenizer's ids, or of bytes, is refused.
        with open(self.path("model.safetensors"), "rb") as f:
            meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
        self.assertEqual(meta["tokenizer_checksum"], str(checksum))
        gen = [WORKER_BIN, f"--generate={self.path('model.safetensors')}", "--sample_tokens=4"]
        for args, reason in ((["--prompt_ids=5 6", f"--tokenizer={other}/tokenizer.model"],
                              f"trained on tokenizer {checksum}, not {other_checksum}"),
                             (["--prompt=Q: "], f"reads the tokens of tokenizer {checksum}")):
            r = subprocess.run(gen + args, capture_output=True, text=True, timeout=120)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(reason, r.stderr)


if __name__ == "__main__":
    unittest.main()
