#!/usr/bin/env python3
"""Workers of different speeds, synchronous against asynchronous rounds (bench/README.md).

Runs a real muloco-server and K real workers on loopback twice: --sync=sync for --rounds
rounds, then --sync=async until its model reaches the synchronous run's final validation loss
(at most --async_rounds rounds). Worker i is throttled --slowdowns[i] times (muloco-worker
--slowdown). Prints, per mode: wall time, rounds, pushes merged, worker 0's validation losses
with the seconds since the run started, and the time async took to reach sync's final loss.

  bench/async_speed.py [--build build] [--slowdowns 1,1,2,4] [--rounds 12] [--async_rounds 60]
                       [--inner_steps 10] [-- extra server flags]
"""
import argparse
import os
import re
import tempfile
import time

from cluster import HERE, TINY, Cluster, stamp

EVAL_RE = re.compile(r"^(\S+) INFO \[worker \S+\] eval: round (\d+) val_loss ([\d.]+)", re.M)
CLOSED_RE = re.compile(r"round \d+ closed: (\d+) contributors")


def run(a, mode, rounds, logdir):
    """One run to its end; returns (wall s, [(s since start, round, val loss)], contributors per round)."""
    flags = [*TINY, f"--sync={mode}", f"--rounds={rounds}", f"--inner_steps={a.inner_steps}", "--eval_every=2",
             f"--min_quorum={2 if mode == 'async' else len(a.slowdowns)}", "--round_timeout_s=600", *a.extra]
    t0 = time.time()
    cluster = Cluster(a.build, logdir)
    try:
        port = cluster.start_server(flags)
        for i, s in enumerate(a.slowdowns):
            cluster.start_worker(f"w{i}", port, [f"--slowdown={s}"])
        cluster.wait(a.timeout)
    finally:
        cluster.kill()
    wall = time.time() - t0
    text = open(os.path.join(logdir, "w0.log")).read()
    evals = [(stamp(ts) - t0, int(r), float(v)) for ts, r, v in EVAL_RE.findall(text)]
    closes = [int(c) for c in CLOSED_RE.findall(open(os.path.join(logdir, "server.log")).read())]
    return wall, evals, closes


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--slowdowns", default="1,1,2,4")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--async_rounds", type=int, default=60)
    p.add_argument("--inner_steps", type=int, default=10)
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--logs", default=None)
    p.add_argument("extra", nargs="*")
    a = p.parse_args()
    a.slowdowns = [float(s) for s in a.slowdowns.split(",")]
    logs = a.logs or tempfile.mkdtemp(prefix="muloco_async_")
    print(f"async_speed: {len(a.slowdowns)} workers, slowdowns {a.slowdowns}, H={a.inner_steps}; logs in {logs}")
    sync_wall, sync_evals, sync_closes = run(a, "sync", a.rounds, os.path.join(logs, "sync"))
    target = sync_evals[-1][2]
    async_wall, async_evals, async_closes = run(a, "async", a.async_rounds, os.path.join(logs, "async"))
    reached = next(((t, r, v) for t, r, v in async_evals if v <= target), None)
    for name, wall, evals, closes in (("sync", sync_wall, sync_evals, sync_closes),
                                      ("async", async_wall, async_evals, async_closes)):
        print(f"{name:5s}: {len(closes)} rounds, {sum(closes)} pushes merged, {wall:.1f} s; worker 0's evaluations "
              + ", ".join(f"{t:.1f}s r{r} {v:.4f}" for t, r, v in evals))
    if reached:
        print(f"async reached sync's final val loss {target:.4f} at {reached[0]:.1f} s (round {reached[1]}): "
              f"{sync_evals[-1][0] / reached[0]:.2f}x sooner than sync's {sync_evals[-1][0]:.1f} s")
    else:
        print(f"async did not reach sync's final val loss {target:.4f} in {a.async_rounds} rounds "
              f"(best {min(v for _, _, v in async_evals):.4f})")


if __name__ == "__main__":
    main()
