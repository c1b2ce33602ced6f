#!/usr/bin/python3
"""The Python worker's outer step against muloco-worker's, on the demo model (the built-in
GPT, 135,808 parameters), same codec, same link (loopback), one worker per run so no round
waits for anyone else. The outer step is what a round costs beyond its inner steps:
muloco-worker's from its trained parameters to the next round's model in its LibTorch
model (computing Δ, the check, encoding, push, the round's close, decoding, the checksum and
loading the new model; its summary line "outer step"), the Python worker's the wall time of
each sync() call as the training loop sees it (tests/integration/gpt_worker.py: the same
work, from and into the loop's own tensors). Runs alternate C++ and Python, so a machine's drift hits both;
prints each run and the ratio of the medians per preset.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_worker_speed.py [--build=build] [--repeats=3]"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GPT_WORKER = os.path.join(HERE, "..", "tests", "integration", "gpt_worker.py")
DEMO = {"n_layer": 2, "n_head": 4, "d_model": 64, "context": 64}  # the run config's defaults


def start_server(build, tmp, preset, rounds, inner_steps):
    port_file = os.path.join(tmp, f"port.{time.monotonic_ns()}")
    server = subprocess.Popen([os.path.join(build, "muloco-server"), f"--preset={preset}", f"--rounds={rounds}",
                               f"--inner_steps={inner_steps}", "--eval_every=0", "--insecure", "--open_join",
                               "--listen=127.0.0.1:0", f"--port_file={port_file}", "--linger_s=1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (os.path.exists(port_file) and open(port_file).read().strip()):
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError("muloco-server did not start")
        time.sleep(0.05)
    return server, f"127.0.0.1:{open(port_file).read().strip()}"


def outer_ms(build, tmp, kind, preset, rounds, inner_steps):
    """One run of one worker: its mean outer step in milliseconds."""
    server, addr = start_server(build, tmp, preset, rounds, inner_steps)
    try:
        if kind == "C++":
            cmd = [os.path.join(build, "muloco-worker"), f"--server={addr}", "--insecure", "--threads=1"]
            pattern = r"outer step\s+([\d.]+) ms per round over (\d+) rounds"
        else:
            cmd = [sys.executable, GPT_WORKER, f"--server={addr}", *[f"--{k}={v}" for k, v in DEMO.items()]]
            pattern = r"sync: ([\d.]+) ms per round over (\d+) rounds"
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        m = re.search(pattern, r.stdout + r.stderr)
        if r.returncode != 0 or not m or int(m.group(2)) != rounds:
            raise RuntimeError(f"{kind} worker failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return float(m.group(1))
    finally:
        server.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--presets", default="muloco-2bit,diloco")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--inner_steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    for preset in args.presets.split(","):
        runs = {"C++": [], "Python": []}
        for i in range(args.repeats):
            for kind in (("C++", "Python") if i % 2 == 0 else ("Python", "C++")):
                runs[kind].append(outer_ms(args.build, tmp, kind, preset, args.rounds, args.inner_steps))
                print(f"{preset:12s} {kind:6s} run {i + 1}: {runs[kind][-1]:7.2f} ms per outer step", flush=True)
        cxx, py = statistics.median(runs["C++"]), statistics.median(runs["Python"])
        print(f"{preset:12s} median outer step: C++ {cxx:.2f} ms, Python {py:.2f} ms; Python / C++ = {py / cxx:.3f}")


if __name__ == "__main__":
    main()
