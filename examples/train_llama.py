#!/usr/bin/python3
"""Train your own model with muloco: a small LLaMA-style model (RMSNorm, rotary positions,
SwiGLU, no biases) written in plain PyTorch, with its own training loop, on the bytes of a
text corpus. It is not muloco's built-in GPT; the server learns its tensors from the initial
model file.

    # 1. write the initial model, 2. serve it, 3. run workers that call sync()
    PYTHONPATH=build/python /usr/bin/python3 examples/train_llama.py --write_init=init.safetensors
    build/muloco-server --init_model=init.safetensors --preset=muloco-2bit --rounds=10 --inner_steps=20 \\
        --insecure --open_join --listen=127.0.0.1:7070
    PYTHONPATH=build/python /usr/bin/python3 examples/train_llama.py --server=127.0.0.1:7070 --insecure --seed=1
    PYTHONPATH=build/python /usr/bin/python3 examples/train_llama.py --server=127.0.0.1:7070 --insecure --seed=2

Each worker prints "round R val_loss X" after every round and "final checksum C" at the end
(the server's model, bit for bit)."""
import argparse
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import muloco


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, base=10000.0):
    """Rotary position embedding over the last dimension of (batch, heads, time, head_dim), in
    Hugging Face's rotate-half pairing (element i with i + head_dim/2), as muloco's --arch=llama."""
    t, d = x.shape[-2], x.shape[-1]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.arange(t, dtype=torch.float32)[:, None] * freqs[None, :]
    cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        att = rotary(q) @ rotary(k).transpose(-2, -1) / math.sqrt(d // self.heads)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
        self.self_attn, self.mlp = Attention(d, heads), MLP(d, 4 * d)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """Parameter names follow Hugging Face's LLaMA (model.layers.N.self_attn.q_proj.weight, ...)."""

    def __init__(self, vocab=256, d=32, layers=1, heads=2):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, d)
        self.model.layers = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.model.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.model.embed_tokens(idx)
        for block in self.model.layers:
            x = block(x)
        logits = self.lm_head(self.model.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def load_bytes(path, limit=4 << 20):
    """The corpus as bytes (a file, or every file of a directory in name order), at most `limit`."""
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if not f.endswith(".dat"))
    out = bytearray()
    for f in files:
        with open(f, "rb") as fh:
            out += fh.read()
        if len(out) >= limit:
            break
    return torch.tensor(np.frombuffer(bytes(out[:limit]), dtype=np.uint8).astype(np.int64))


def batch(data, size, context, gen):
    starts = torch.randint(0, len(data) - context - 1, (size,), generator=gen)
    rows = torch.stack([data[s:s + context + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


def evaluate(model, val, context, batches=8):
    gen = torch.Generator().manual_seed(12345)  # the same windows every time
    with torch.no_grad():
        return sum(model(*batch(val, 16, context, gen)).item() for _ in range(batches)) / batches


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write_init", help="write the initial model here (for muloco-server --init_model) and exit")
    ap.add_argument("--server", default="127.0.0.1:7070")
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--token_file")
    ap.add_argument("--tls_ca", default="")
    ap.add_argument("--name", default="")
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--seed", type=int, default=1, help="this worker's data order")
    ap.add_argument("--batch_size", type=int, default=16)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--save_final", help="write the final parameters here (raw float32, the run's order)")
    args = ap.parse_args()
    torch.manual_seed(0)  # the initial model; workers take the server's anyway
    torch.set_num_threads(1)
    model = Llama()
    if args.write_init:
        muloco.save_initial(model, args.write_init, {"model": "examples/train_llama.py"})
        print(f"wrote {args.write_init}: {sum(p.numel() for p in model.parameters())} parameters")
        return
    data = load_bytes(args.data)
    split = int(len(data) * 0.9)
    train, val = data[:split], data[split:]
    gen = torch.Generator().manual_seed(args.seed)
    with muloco.Worker(model, args.server, name=args.name, insecure=args.insecure, token_file=args.token_file,
                       tls_ca=args.tls_ca) as worker:
        optimizers = worker.optimizers()  # the run's: Muon for the hidden matrices (muloco presets), AdamW
        print(f"joined at round {worker.round}: {sum(p.numel() for p in model.parameters())} parameters", flush=True)
        while not worker.done:
            start, losses = time.time(), []
            steps = worker.inner_steps  # H, or fewer when the server says so: read once a round
            for i in range(steps):
                worker.set_lr(worker.round * worker.config["inner_steps"] + i)
                loss = model(*batch(train, args.batch_size, args.context, gen))
                for opt in optimizers:
                    opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), worker.config["grad_clip"])
                for opt in optimizers:
                    opt.step()
                losses.append(loss.item())
            r = worker.round
            out = worker.sync(loss=sum(losses) / len(losses), tokens=steps * args.batch_size * args.context,
                              train_seconds=time.time() - start)
            print(f"round {r} train_loss {sum(losses) / len(losses):.4f} val_loss {evaluate(model, val, args.context):.4f}"
                  f" applied {out['applied']} contributors {out['contributors']}", flush=True)
        print(f"final checksum {worker.checksum:016x}", flush=True)
        if args.save_final:
            worker.save_final(args.save_final)


if __name__ == "__main__":
    main()
