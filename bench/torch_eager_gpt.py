#!/usr/bin/python3
"""The demo GPT and its inner optimizer in PyTorch eager, timed like bench/train_speed.

An independent implementation (nn.Module, nn.Linear, torch.optim.AdamW) of the model in
worker/gpt.cc with the same shapes and the same training step: token + position embeddings,
pre-LayerNorm blocks (causal softmax attention, exact-erf GELU MLP, no linear biases), final
LayerNorm, untied LM head, cross-entropy; AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1
on 2-D tensors, 0 on LayerNorm gains and biases), gradient clipping at 1.0, warmup + cosine
learning rate. Batches are random byte windows of the same corpus (Debian's fortunes).

    /usr/bin/python3 bench/torch_eager_gpt.py [--steps 30] [--threads 1]
    python3 bench/torch_eager_gpt.py --device cuda --dtype bf16 --n_layer 12 --d_model 768 ...

(--device cuda: on a GPU, e.g. by tests/gpu/run.sh beside train_speed --device=cuda; --dtype
bf16 autocasts forward and backward as muloco-worker --dtype=bf16 does.)

Prints human-readable lines and `torch_<name> <value>` lines for scripts. Run it with
Debian's interpreter (/usr/bin/python3, package python3-torch).
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The demo configuration (common/run_config.cc, DefaultRunConfig).
VOCAB, N_LAYER, N_HEAD, D_MODEL, CONTEXT = 256, 2, 4, 64, 64
BATCH, H, ROUNDS = 16, 20, 10
LR, MIN_LR_RATIO, WARMUP = 3e-3, 0.1, 20
BETAS, EPS, WEIGHT_DECAY, GRAD_CLIP = (0.9, 0.95), 1e-8, 0.1, 1.0
INIT_SEED = 1234


class Block(nn.Module):
    def __init__(self, d, n_head, context):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.attn_proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.mlp_proj = nn.Linear(4 * d, d, bias=False)
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, hd).transpose(1, 2) for z in (q, k, v))
        if x.is_cuda:  # the fused kernel, as muloco-worker uses on a GPU
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            y = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D_MODEL)
        self.wpe = nn.Embedding(CONTEXT, D_MODEL)
        self.blocks = nn.ModuleList(Block(D_MODEL, N_HEAD, CONTEXT) for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)
        # GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * N_LAYER) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens):
        idx, targets = tokens[:, :-1], tokens[:, 1:]
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:t]
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def learning_rate(step):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    span = max(1.0, ROUNDS * H - WARMUP)
    progress = min(1.0, (step - WARMUP) / span)
    min_lr = LR * MIN_LR_RATIO
    return min_lr + 0.5 * (LR - min_lr) * (1.0 + math.cos(math.pi * progress))


def load_train_bytes(path):
    """Training bytes of a fortunes-style directory or text file: documents split on
    "\\n%\\n", every 10th held out, the rest concatenated (each followed by the separator)."""
    if os.path.isdir(path):
        files = sorted(
            os.path.join(path, n) for n in os.listdir(path)
            if not n.startswith(".") and not n.endswith(".dat")
            and os.path.isfile(os.path.join(path, n)) and not os.path.islink(os.path.join(path, n)))
    else:
        files = [path]
    train, docs = [], 0
    for f in files:
        with open(f, "rb") as fh:
            for doc in fh.read().split(b"\n%\n"):
                if docs % 10 != 9:
                    train.append(doc + b"\n%\n")
                docs += 1
    data = b"".join(train)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64), len(files), docs


def main():
    global N_LAYER, N_HEAD, D_MODEL, CONTEXT, BATCH
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="timed inner steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed inner steps before timing")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--data", default="/usr/share/games/fortunes", help="corpus directory or text file")
    ap.add_argument("--seed", type=int, default=1, help="batch sampling seed")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16: autocast forward/backward")
    for name, default in (("n_layer", N_LAYER), ("n_head", N_HEAD), ("d_model", D_MODEL), ("context", CONTEXT),
                          ("batch_size", BATCH)):
        ap.add_argument(f"--{name}", type=int, default=default, help="model shape (default: the demo's)")
    args = ap.parse_args()
    N_LAYER, N_HEAD, D_MODEL, CONTEXT, BATCH = args.n_layer, args.n_head, args.d_model, args.context, args.batch_size
    device = torch.device(args.device)
    if args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--steps and --threads must be >= 1, --warmup >= 0")
    torch.set_num_threads(args.threads)

    train, n_files, n_docs = load_train_bytes(args.data)
    torch.manual_seed(INIT_SEED)
    model = Gpt().to(device)
    train = train.to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    window = torch.arange(CONTEXT + 1, device=device)

    def inner_step(step):
        for g in opt.param_groups:
            g["lr"] = learning_rate(step)
        starts = torch.randint(0, train.numel() - CONTEXT, (BATCH,), generator=gen, device=device)
        batch = train[starts[:, None] + window]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = model(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        return loss.item()

    step, first_loss = 0, 0.0
    for i in range(args.warmup):
        loss = inner_step(step)
        first_loss = loss if i == 0 else first_loss
        step += 1
    start = time.perf_counter()
    for _ in range(args.steps):
        last_loss = inner_step(step)
        step += 1
    seconds = time.perf_counter() - start

    tokens = BATCH * CONTEXT * args.steps
    n_params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, corpus {args.data} ({n_files} files, {n_docs} documents): "
          f"{train.numel()} train tokens")
    print(f"params: {n_params}, device {args.device} {args.dtype}, threads: {torch.get_num_threads()}, warmup steps: {args.warmup}, "
          f"timed steps: {args.steps}")
    print(f"loss: {first_loss:.4f} (first warmup step) -> {last_loss:.4f} (last timed step)")
    print(f"inner loop: {seconds:.3f} s for {tokens} tokens = {tokens / seconds:.0f} tokens/s "
          f"({1e3 * seconds / args.steps:.2f} ms/step)")
    print(f"torch_threads {torch.get_num_threads()}")
    print(f"torch_params {n_params}")
    print(f"torch_tokens_per_s {tokens / seconds:.0f}")
    print(f"torch_step_ms {1e3 * seconds / args.steps:.3f}")


if __name__ == "__main__":
    main()
