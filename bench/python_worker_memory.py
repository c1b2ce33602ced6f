#!/usr/bin/python3
"""What the Python package holds beside the user's model: a muloco.Worker joins a real
server with a LLaMA-style model (examples/train_llama.py) and syncs three rounds, while
tracemalloc counts every Python-side allocation (numpy's included; the parameters are
handed to C++ as views) and /proc counts the process's resident memory (the C++ core's
θ_pub, error feedback and codec buffers). Prints both against the model's fp32 size.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_worker_memory.py [--build=build] [--d=256 --layers=4]"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import muloco  # noqa: E402
from train_llama import Llama, batch  # noqa: E402


def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Llama(d=args.d, layers=args.layers, heads=4)
    n = sum(p.numel() for p in model.parameters())
    tmp = tempfile.mkdtemp()
    init, port_file = os.path.join(tmp, "init.safetensors"), os.path.join(tmp, "port")
    muloco.save_initial(model, init)
    server = subprocess.Popen([os.path.join(args.build, "muloco-server"), f"--init_model={init}", "--rounds=3",
                               "--inner_steps=1", "--insecure", "--open_join", "--listen=127.0.0.1:0",
                               f"--port_file={port_file}", "--linger_s=1"], stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            time.sleep(0.05)
        addr = f"127.0.0.1:{open(port_file).read().strip()}"
        data = torch.randint(0, 256, (100000,))
        gen = torch.Generator().manual_seed(1)
        rss0 = rss_mib()
        tracemalloc.start()
        with muloco.Worker(model, addr, insecure=True, connect_timeout_s=30) as worker:
            opt = torch.optim.AdamW(worker.parameter_groups(), lr=1e-3)
            rss_joined = rss_mib()
            while not worker.done:
                loss = model(*batch(data, 4, 32, gen))
                opt.zero_grad()
                loss.backward()
                opt.step()
                worker.sync(loss=loss.item())
            _, peak = tracemalloc.get_traced_memory()
            rss_end = rss_mib()
        tracemalloc.stop()
    finally:
        server.wait(timeout=60)
    mib = 4 * n / 2**20
    print(f"model: {n} parameters, {mib:.1f} MiB in fp32")
    print(f"Python-side allocations, peak over join and 3 syncs: {peak / 2**20:.2f} MiB ({peak / (4 * n):.3f}x the model)")
    print(f"process RSS: +{rss_joined - rss0:.1f} MiB after join, +{rss_end - rss0:.1f} MiB after 3 rounds "
          f"({(rss_end - rss0) / mib:.1f}x the model; AdamW's state is 2x of it)")


if __name__ == "__main__":
    main()
