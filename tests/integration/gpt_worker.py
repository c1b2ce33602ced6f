#!/usr/bin/python3
"""A Python worker (the muloco package) for muloco's built-in GPT, to run beside C++ workers:
the parameters under the layout's names (common/model_layout.cc), the forward pass of
tests/reference/torch_reference.py, torch's AdamW with the run's settings and schedule, batches
of the fortunes bytes (examples/train_llama.py's sampling); --overlap_steps=K: with overlap,
each update landing after exactly K steps of the next round. Under torchrun the ranks are one
site (muloco.SiteWorker, gloo): each samples its own batches, gradients are averaged over the
ranks, and each rank prints the checksum of the model it holds after every round.

    gpt_worker.py --server=HOST:PORT --save_final=F
    python3 -m torch.distributed.run --nproc_per_node=2 gpt_worker.py --server=HOST:PORT"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import xxhash

import muloco

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from torch_reference import gpt_loss  # noqa: E402
from train_llama import batch, load_bytes  # noqa: E402


class Gpt:
    """The GPT's tensors by name (values come from the server at Join)."""

    def __init__(self, vocab, n_layer, d, context):
        shapes = [("wte", (vocab, d)), ("wpe", (context, d))]
        for i in range(n_layer):
            h = f"h.{i}."
            shapes += [(h + "ln1.weight", (d,)), (h + "ln1.bias", (d,)), (h + "attn.qkv.weight", (3 * d, d)),
                       (h + "attn.proj.weight", (d, d)), (h + "ln2.weight", (d,)), (h + "ln2.bias", (d,)),
                       (h + "mlp.fc.weight", (4 * d, d)), (h + "mlp.proj.weight", (d, 4 * d))]
        shapes += [("ln_f.weight", (d,)), ("ln_f.bias", (d,)), ("lm_head.weight", (vocab, d))]
        self.P = {name: torch.nn.Parameter(torch.zeros(shape)) for name, shape in shapes}

    def named_parameters(self):
        return self.P.items()


def checksum(model):
    """ParamChecksum (codec/checksum.h): xxh64 of the fp32 parameters in layout order."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.P.values()]).numpy().tobytes()
    return xxhash.xxh64_intdigest(flat, seed=0x6D756C6F636F)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--n_layer", type=int, default=1)
    ap.add_argument("--n_head", type=int, default=2)
    ap.add_argument("--d_model", type=int, default=32)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--save_final")
    ap.add_argument("--overlap_steps", type=int, default=0, help="overlap, landing after exactly this many steps")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = Gpt(256, args.n_layer, args.d_model, args.context)
    cfg = {"d_model": args.d_model, "n_head": args.n_head, "n_layer": args.n_layer}
    data = load_bytes("/usr/share/games/fortunes")
    site = "RANK" in os.environ
    rank = 0
    if site:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    gen = torch.Generator().manual_seed(args.seed + 1000 * rank)
    join = muloco.SiteWorker if site else muloco.Worker
    overlap = {"overlap": True, "overlap_steps": args.overlap_steps} if args.overlap_steps else {}
    with join(model, args.server, name="py", insecure=True, **overlap) as worker:
        c = worker.config
        groups = [{"params": [model.P[n] for n, _ in model.named_parameters() if (len(model.P[n].shape) >= 2) == decay],
                   "weight_decay": c["weight_decay"] if decay else 0.0} for decay in (True, False)]
        opt = torch.optim.AdamW(groups, lr=c["inner_lr"], betas=(c["beta1"], c["beta2"]), eps=c["adam_eps"])
        sync_s = []  # wall time of each sync(): the outer step as the loop sees it
        while not worker.done:
            losses = []
            steps = worker.inner_steps  # read once a round: sync() claims the value read last
            for i in range(steps):
                for g in opt.param_groups:
                    g["lr"] = c["inner_lr"] * worker.lr_factor(worker.round * c["inner_steps"] + i)
                x, y = batch(data, c["batch_size"], args.context, gen)
                loss = gpt_loss(model.P, cfg, torch.cat([x, y[:, -1:]], dim=1))
                opt.zero_grad()
                loss.backward()
                if site:  # data parallelism inside the site: the ranks' mean gradient
                    for p in model.P.values():
                        dist.all_reduce(p.grad)
                        p.grad /= dist.get_world_size()
                torch.nn.utils.clip_grad_norm_(list(model.P.values()), c["grad_clip"])
                opt.step()
                losses.append(loss.item())
                if overlap and worker.after_step():
                    print(f"rank {rank} landed round {worker.round - 1} after step {i + 1}", flush=True)
            t0 = time.perf_counter()
            out = worker.sync(loss=sum(losses) / len(losses), tokens=steps * c["batch_size"] * args.context)
            sync_s.append(time.perf_counter() - t0)
            print(f"rank {rank} round {out['round'] - 1} train_loss {sum(losses) / len(losses):.4f} "
                  f"applied {out['applied']} checksum {checksum(model):016x}", flush=True)
        print(f"rank {rank} sync: {1e3 * sum(sync_s) / max(len(sync_s), 1):.2f} ms per round over {len(sync_s)} rounds",
              flush=True)
        if overlap:
            worker.leave()  # lands the last flight: the parameters then hold the run's final model
        if args.save_final:
            torch.cat([p.detach().reshape(-1) for p in model.P.values()]).numpy().astype("<f4").tofile(
                f"{args.save_final}.{rank}" if site else args.save_final)
    if site:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
