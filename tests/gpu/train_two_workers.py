#!/usr/bin/env python3
"""A short real run on a GPU: one muloco-server and two muloco-workers with --device=cuda
(the model, the inner optimizers, error feedback and the uplink encoder on the GPU), MuLoCo
2-bit both ways. Checks that both workers trained on cuda:0, that the loss fell, and that
both replicas end bit-identical to the server's model (the final checksums agree).

    tests/gpu/train_two_workers.py BUILD_DIR [--dtype fp32|bf16] [--rounds 4] [--data DIR] [--logs DIR]

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
    ap.add_argument("--device", default="cuda", help="cuda (cpu: to try this script on a machine without a GPU)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--data", default="", help="corpus for the workers (default: theirs, Debian's fortunes)")
    ap.add_argument("--logs", default="", help="keep the logs here (default: a temporary folder)")
    ap.add_argument("--timeout", type=float, default=100, help="seconds for the whole run")
    a = ap.parse_args()
    data = [f"--data={a.data}"] if a.data else []
    server_bin, worker_bin = (os.path.join(a.build, b) for b in ("muloco-server", "muloco-worker"))
    tmp = a.logs or tempfile.mkdtemp(prefix="muloco_gpu_")
    os.makedirs(tmp, exist_ok=True)
    deadline = time.time() + a.timeout
    port_file = os.path.join(tmp, "port")
    flags = ["--preset=muloco-2bit", f"--rounds={a.rounds}", "--inner_steps=20", "--eval_every=1"]
    logs = {name: open(os.path.join(tmp, f"{a.dtype}_{name}.log"), "w+") for name in ("server", "w0", "w1")}
    procs, codes = {}, {"w0": None, "w1": None}
    try:
        procs["server"] = subprocess.Popen([server_bin, "--listen=127.0.0.1:0", f"--port_file={port_file}", "--insecure",
                                            "--open_join", "--min_quorum=2", "--linger_s=5", *flags],
                                           stdout=logs["server"], stderr=subprocess.STDOUT)
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.time() > deadline or procs["server"].poll() is not None:
                raise RuntimeError("server did not start")
            time.sleep(0.1)
        port = open(port_file).read().strip()
        for w in ("w0", "w1"):
            procs[w] = subprocess.Popen([worker_bin, f"--server=127.0.0.1:{port}", "--insecure", f"--name={w}",
                                         f"--device={a.device}", f"--dtype={a.dtype}", "--heartbeat_s=1", *data],
                                        stdout=logs[w], stderr=subprocess.STDOUT)
        for w in ("w0", "w1"):
            codes[w] = procs[w].wait(timeout=max(1, deadline - time.time()))
        procs["server"].wait(timeout=max(1, deadline - time.time()))
    except (subprocess.TimeoutExpired, RuntimeError) as e:
        print(f"FAIL {e}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    text = {}
    for name, f in logs.items():
        f.seek(0)
        text[name] = f.read()
    ok = all(c is not None for c in codes.values())

    def check(cond, what):
        nonlocal ok
        print(("ok   " if cond else "FAIL ") + what)
        ok = ok and cond

    server_sum = re.findall(r"final checksum ([0-9a-f]{16})", text["server"])
    check(bool(server_sum), "server logged its final checksum")
    for w in ("w0", "w1"):
        check(codes[w] == 0, f"{w} exited 0 (got {codes[w]})")
        where = "cuda:0" if a.device == "cuda" else a.device
        check(f"device {where}" in text[w], f"{w} trained on {where}")
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
