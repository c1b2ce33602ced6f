#!/usr/bin/python3
"""Independent PyTorch references for muloco's optimizers (run with Debian's python3-torch).

  torch_reference.py sgd DIR    outer step: torch.optim.SGD(lr, momentum, nesterov)
  torch_reference.py adamw DIR  inner steps: a GPT or LLaMA written here from scratch, trained with
                                torch.optim.AdamW (and this file's Muon for the matrices when
                                "inner" is "muon"), warmup + cosine schedule, grad clipping
  torch_reference.py muon DIR   Muon steps written from Keller Jordan's description (momentum
                                EMA, Nesterov, quintic Newton-Schulz, shape scale, decoupled decay)

DIR holds config.json and raw little-endian inputs written by tests/unit/reference_test.cc;
outputs are written back into DIR.
"""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F


def sgd(d, cfg):
    n, steps = cfg["n"], cfg["steps"]
    p = torch.tensor(np.fromfile(f"{d}/p0.f32", dtype=np.float32))
    grads = np.fromfile(f"{d}/grads.f32", dtype=np.float32).reshape(steps, n)
    p = torch.nn.Parameter(p)
    opt = torch.optim.SGD([p], lr=cfg["lr"], momentum=cfg["momentum"], nesterov=cfg["nesterov"])
    out = []
    for s in range(steps):
        p.grad = torch.tensor(grads[s])
        opt.step()
        out.append(p.detach().numpy().copy())
    np.stack(out).astype(np.float32).tofile(f"{d}/expected.f32")


def lr_at(cfg, step):
    peak, warm = cfg["inner_lr"], cfg["warmup_steps"]
    if step < warm:
        return peak * (step + 1) / warm
    total = cfg["total_rounds"] * cfg["inner_steps"]
    progress = min(1.0, (step - warm) / max(1.0, total - warm))
    floor = peak * cfg["min_lr_ratio"]
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def gpt_loss(P, cfg, tokens):
    """P: dict name -> tensor. Pre-LN GPT, causal attention, GELU MLP, untied head."""
    d, nh, nl = cfg["d_model"], cfg["n_head"], cfg["n_layer"]
    x_idx, y = tokens[:, :-1], tokens[:, 1:]
    B, T = x_idx.shape
    x = P["wte"][x_idx] + P["wpe"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(nl):
        h = F.layer_norm(x, (d,), P[f"h.{i}.ln1.weight"], P[f"h.{i}.ln1.bias"])
        q, k, v = (h @ P[f"h.{i}.attn.qkv.weight"].t()).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, T, nh, d // nh).permute(0, 2, 1, 3) for t in (q, k, v))
        w = (q @ k.transpose(-1, -2)) / math.sqrt(d // nh)
        w = w.masked_fill(~causal, float("-inf")).softmax(-1)
        a = (w @ v).permute(0, 2, 1, 3).reshape(B, T, d)
        x = x + a @ P[f"h.{i}.attn.proj.weight"].t()
        h = F.layer_norm(x, (d,), P[f"h.{i}.ln2.weight"], P[f"h.{i}.ln2.bias"])
        x = x + F.gelu(h @ P[f"h.{i}.mlp.fc.weight"].t()) @ P[f"h.{i}.mlp.proj.weight"].t()
    x = F.layer_norm(x, (d,), P["ln_f.weight"], P["ln_f.bias"])
    logits = x @ P["lm_head.weight"].t()
    return F.cross_entropy(logits.reshape(B * T, -1), y.reshape(-1))


def llama_loss(P, cfg, tokens):
    """P: dict name -> tensor, Hugging Face LLaMA names. RMSNorm (eps 1e-5), rotary positions
    (base 10000, first half of each head paired with its second half), grouped-query
    attention, SwiGLU MLP, no biases; the head tied to the embedding when lm_head is absent."""
    d, nh, nkv, nl = cfg["d_model"], cfg["n_head"], cfg["n_kv_head"], cfg["n_layer"]
    hd = d // nh
    x_idx, y = tokens[:, :-1], tokens[:, 1:]
    B, T = x_idx.shape

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + 1e-5) * w

    pos = torch.arange(T, dtype=torch.float64)[:, None]
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.cat([pos * inv, pos * inv], dim=-1).float()
    cos, sin = torch.cos(ang), torch.sin(ang)

    def rope(t):
        a, b = t[..., :hd // 2], t[..., hd // 2:]
        return t * cos + torch.cat([-b, a], dim=-1) * sin

    x = F.embedding(x_idx, P["model.embed_tokens.weight"])
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(nl):
        L = f"model.layers.{i}."
        h = rms(x, P[L + "input_layernorm.weight"])
        q = (h @ P[L + "self_attn.q_proj.weight"].t()).view(B, T, nh, hd).transpose(1, 2)
        k = (h @ P[L + "self_attn.k_proj.weight"].t()).view(B, T, nkv, hd).transpose(1, 2)
        v = (h @ P[L + "self_attn.v_proj.weight"].t()).view(B, T, nkv, hd).transpose(1, 2)
        q, k = rope(q), rope(k)
        group = nh // nkv  # query head j reads key/value head j // group
        k = k[:, [j // group for j in range(nh)]]
        v = v[:, [j // group for j in range(nh)]]
        w = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        w = w.masked_fill(~causal, float("-inf")).softmax(-1)
        a = (w @ v).transpose(1, 2).reshape(B, T, d)
        x = x + a @ P[L + "self_attn.o_proj.weight"].t()
        h = rms(x, P[L + "post_attention_layernorm.weight"])
        gate, up = h @ P[L + "mlp.gate_proj.weight"].t(), h @ P[L + "mlp.up_proj.weight"].t()
        x = x + (gate * torch.sigmoid(gate) * up) @ P[L + "mlp.down_proj.weight"].t()
    x = rms(x, P["model.norm.weight"])
    logits = x @ P.get("lm_head.weight", P["model.embed_tokens.weight"]).t()
    return F.cross_entropy(logits.reshape(B * T, -1), y.reshape(-1))


def adamw(d, cfg):
    flat = np.fromfile(f"{d}/params.f32", dtype=np.float32)
    steps, B, T = cfg["steps"], cfg["batch"], cfg["context"]
    tokens = np.fromfile(f"{d}/tokens.i64", dtype=np.int64).reshape(steps, B, T + 1)
    P, decay, no_decay, matrices, off = {}, [], [], [], 0
    inner_muon = cfg.get("inner") == "muon"
    for name, shape, group in cfg["layout"]:
        numel = int(np.prod(shape))
        P[name] = torch.nn.Parameter(torch.tensor(flat[off:off + numel].reshape(shape)))
        if inner_muon and group == "muon":
            matrices.append(P[name])
        else:
            (decay if len(shape) == 2 else no_decay).append(P[name])
        off += numel
    bufs = [torch.zeros_like(p) for p in matrices]
    kw = dict(betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg["inner_lr"], **kw)
    losses = []
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, s)
        for p in P.values():  # Muon's matrices are not in opt
            p.grad = None
        loss = (llama_loss if cfg.get("arch") == "llama" else gpt_loss)(P, cfg, torch.tensor(tokens[s]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), cfg["grad_clip"])
        opt.step()
        with torch.no_grad():  # the same schedule scales Muon's rate
            for p, buf in zip(matrices, bufs):
                muon_step(p, p.grad, buf, cfg["muon"], cfg["muon"]["lr"] * lr_at(cfg, s) / cfg["inner_lr"],
                          cfg["muon"]["weight_decay"])
        losses.append(loss.item())
    np.concatenate([P[name].detach().numpy().ravel() for name, _, _ in cfg["layout"]]).astype(np.float32).tofile(
        f"{d}/expected_params.f32")
    np.array(losses, dtype=np.float64).tofile(f"{d}/expected_losses.f64")


def newton_schulz(g, steps, coeffs):
    a, b, c = coeffs
    x = g.float()
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon_step(p, g, buf, cfg, lr, wd):
    """One Muon step of matrix p with gradient g and momentum buffer buf (in place)."""
    beta = cfg["momentum"]
    r, c = p.shape
    buf.mul_(beta).add_(g, alpha=1 - beta)             # EMA momentum
    u = g * (1 - beta) + buf * beta if cfg["nesterov"] else buf.clone()
    u = newton_schulz(u, cfg["ns_steps"], cfg["coeffs"])
    u = u * (max(1.0, r / c) ** 0.5 if cfg["scale"] == "shape" else 0.2 * max(r, c) ** 0.5)
    p.mul_(1 - lr * wd).sub_(lr * u)


def muon(d, cfg):
    shapes, steps = cfg["shapes"], cfg["steps"]
    flat = np.fromfile(f"{d}/params.f32", dtype=np.float32)
    grads = np.fromfile(f"{d}/grads.f32", dtype=np.float32).reshape(steps, -1)
    params, bufs, off = [], [], 0
    for r, c in shapes:
        params.append(torch.tensor(flat[off:off + r * c].reshape(r, c)))
        bufs.append(torch.zeros(r, c))
        off += r * c
    for s in range(steps):
        off = 0
        for p, buf in zip(params, bufs):
            r, c = p.shape
            g = torch.tensor(grads[s, off:off + r * c].reshape(r, c))
            off += r * c
            muon_step(p, g, buf, cfg, cfg["lr"], cfg["weight_decay"])
    np.concatenate([p.numpy().ravel() for p in params]).astype(np.float32).tofile(f"{d}/expected.f32")


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, d = sys.argv[1], sys.argv[2]
    with open(f"{d}/config.json") as f:
        cfg = json.load(f)
    {"sgd": sgd, "adamw": adamw, "muon": muon}[mode](d, cfg)
