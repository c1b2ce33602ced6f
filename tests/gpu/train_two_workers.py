#!/usr/bin/env python3
"""A short real run on a GPU: one muloco-server and two muloco-workers with --device=cuda
(the model, the inner optimizers, error feedback and the uplink encoder on the GPU), MuLoCo
2-bit both ways. Checks that both workers trained on cuda:0, that the loss fell, and that
both replicas end bit-identical to the server's model (the final checksums agree).

    tests/gpu/train_two_workers.py BUILD_DIR [--dtype fp32|bf16] [--rounds 4]

Exit 0 when every check passes. Uses only the standard library (no grpc needed)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    server_bin, worker_bin = (os.path.join(a.build, b) for b in ("muloco-server", "muloco-worker"))
    tmp = tempfile.mkdtemp(prefix="muloco_gpu_")
    port_file = os.path.join(tmp, "port")
    flags = ["--preset=muloco-2bit", f"--rounds={a.rounds}", "--inner_steps=20", "--eval_every=1"]
    logs = {name: open(os.path.join(tmp, name + ".log"), "w+") for name in ("server", "w0", "w1")}
    procs = {}
    try:
        procs["server"] = subprocess.Popen([server_bin, "--listen=127.0.0.1:0", f"--port_file={port_file}", "--insecure",
                                            "--open_join", "--min_quorum=2", "--linger_s=5", *flags],
                                           stdout=logs["server"], stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.time() > deadline or procs["server"].poll() is not None:
                raise RuntimeError("server did not start")
            time.sleep(0.1)
        port = open(port_file).read().strip()
        for w in ("w0", "w1"):
            procs[w] = subprocess.Popen([worker_bin, f"--server=127.0.0.1:{port}", "--insecure", f"--name={w}",
                                         "--device=cuda", f"--dtype={a.dtype}", "--heartbeat_s=1"],
                                        stdout=logs[w], stderr=subprocess.STDOUT)
        codes = {w: procs[w].wait(timeout=240) for w in ("w0", "w1")}
        procs["server"].wait(timeout=60)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    text = {}
    for name, f in logs.items():
        f.seek(0)
        text[name] = f.read()
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("ok   " if cond else "FAIL ") + what)
        ok = ok and cond

    server_sum = re.findall(r"final checksum ([0-9a-f]{16})", text["server"])
    check(bool(server_sum), "server logged its final checksum")
    for w in ("w0", "w1"):
        check(codes[w] == 0, f"{w} exited 0 (got {codes[w]})")
        check(f"device cuda:0" in text[w], f"{w} trained on cuda:0")
        m = re.search(r"final: val_loss ([0-9.]+) \(start ([0-9.]+)\).*checksum ([0-9a-f]{16})", text[w])
        check(m is not None, f"{w} logged its final line")
        if m and server_sum:
            check(float(m.group(1)) < float(m.group(2)), f"{w} val loss fell: {m.group(2)} -> {m.group(1)}")
            check(m.group(3) == server_sum[-1], f"{w} replica bit-identical to the server's ({m.group(3)})")
    if not ok:
        for name in text:
            print(f"---- {name} (last lines)\n" + "\n".join(text[name].splitlines()[-15:]))
    print(f"logs in {tmp}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
