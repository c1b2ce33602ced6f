#!/usr/bin/env python3
"""Goodput under failures: synchronous against asynchronous rounds (bench/README.md).

K real workers (throttled --slowdowns times, muloco-worker --slowdown), each reaching a real
muloco-server on loopback through its own TCP proxy (a link that can be cut). Four runs of
--duration seconds each: async and sync failure-free, then both under one seeded schedule of
failures: per worker a Poisson process with a mean time between failures of --mtbf_rounds
local rounds (H inner steps of a fastest worker, measured in the failure-free async run), each
failure one of kill -9 (restarted after the downtime), SIGSTOP (SIGCONT after it) or a cut
link (restored after it), the downtime uniform in [0.5, 1.5] rounds. Workers save their local
training every --state_every_s (--state_file), so a killed one resumes what it had trained.
A run ends as an operator ends one: links restored, stalls resumed, every worker sent SIGTERM
(it pushes the steps trained since its last push, muloco-worker --leave_timeout_s) and given
--drain_s to leave; nothing trained after the end is counted, nothing trained before is lost
to the end itself.

Reported per run: goodput (inner steps merged into the model / inner steps the workers could
have computed in the wall time, each at its own mean speed in that run's rounds that no stall
touched; also over the time each worker was up: neither killed nor stopped, a cut-off worker
can still train; and where that time went), the time to reach
the failure-free sync run's final validation loss, the validation loss at equal merged tokens
against the same mode's failure-free run, and the longest wait between two round closes. Writes OUT/chaos.txt, chaos.json and, with
gnuplot, chaos.png.

  bench/chaos.py [--build build] [--slowdowns 2,2,4,8] [--inner_steps 100] [--duration 150]
                 [--mtbf_rounds 5] [--state_every_s 0.2] [--drain_s 40] [--seed 0] [--no-adaptive_h] [--out bench/results/chaos]

The async runs use muloco-server --adaptive_h unless --no-adaptive_h; the sync runs are the
classic barrier (every worker takes H steps). The default throttles give speeds 1 : 1 : 2 : 4,
each worker at most half a core (1/2 + 1/2 + 1/4 + 1/8 = 1.4 cores of a 2-core machine, beside the
server): on a busier machine a worker speeds up whenever another dies, and no capacity measured
per worker holds. H = 100 makes a fast worker's round (the tests' tiny GPT) last about 2.3 s
here: long against a restart (process start, join, model fetch: a few tenths of a second), as a
real run's rounds of minutes are against restarts of seconds.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from cluster import HERE, TINY, Cluster, stamp
from harness import Proxy

STAMP = r"^(\S+) \w+ "
CLOSE_RE = re.compile(STAMP + r"\[server\] round (\d+) closed: (\d+) contributors.*?; (\d+) inner steps merged", re.M)
EVAL_RE = re.compile(STAMP + r"\[worker \S+\] eval: round (\d+) val_loss ([\d.]+)", re.M)
PARTING_RE = re.compile(r"pushed the (\d+) steps trained since the last push")
TRAINED_RE = re.compile(STAMP + r"\[worker \S+\] round \d+: train_loss.*?trained ([\d.]+) s, waited [\d.]+ s, "
                        r"checksum \w+ ok(?: \((\d+) of \d+ inner steps\))?(?: \(\+(\d+) steps while)?", re.M)


def schedule(a, names, round_s):
    """[(seconds from the start, worker, kind, downtime s)], seeded."""
    rng = random.Random(a.seed)
    events = []
    for name in names:
        t = 0.0
        while True:
            t += rng.expovariate(1.0 / (a.mtbf_rounds * round_s))
            if t >= a.duration:
                break
            down = rng.uniform(0.5, 1.5) * round_s
            events.append((t, name, rng.choice(["kill", "stall", "cut"]), down))
            t += down  # a worker fails again only once it is back
    return sorted(events)


def end(cluster, proxies, drain_s):
    """The run's end: links restored, stalled workers resumed, then every worker stopped as an
    operator stops one (SIGTERM: it pushes the steps it trained since its last push and
    leaves) and given drain_s to; the steps counted are those trained before the end."""
    for p in proxies.values():
        p.restore()
    live = [w for w in cluster.workers.values() if w.poll() is None]
    for w in live:
        w.send_signal(signal.SIGCONT)
        w.send_signal(signal.SIGTERM)
    deadline = time.time() + drain_s
    for w in live:
        try:
            w.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
    time.sleep(min(1.0, drain_s))  # the last parting pushes' round closes (a grace window)


def run(a, mode, events, logdir):
    """One run of a.duration seconds; returns its measurements."""
    names = [f"w{i}" for i in range(len(a.slowdowns))]
    flags = [*TINY, f"--sync={mode}", "--rounds=1000000", f"--inner_steps={a.inner_steps}", f"--eval_every={a.eval_every}",
             f"--min_quorum={min(2, len(names) - 1) if mode == 'async' else 1}", f"--round_timeout_s={a.round_timeout_s}",
             f"--heartbeat_timeout_s={a.round_timeout_s}", "--grace_max_s=5",
             *(["--adaptive_h"] if mode == "async" and a.adaptive_h else []), *a.server_flags]
    cluster = Cluster(a.build, logdir)
    proxies, downtime = {}, {n: 0.0 for n in names}
    pending = list(events)  # (t, name, kind, down) to start
    recover = []            # (t, name, kind) to end
    try:
        port = cluster.start_server(flags)
        worker_flags = {n: [f"--slowdown={s}", "--heartbeat_s=1", "--stall_timeout_s=10", "--retry_timeout_s=600",
                            *([f"--state_file={os.path.join(logdir, n + '.state')}", f"--state_every_s={a.state_every_s}"]
                              if a.state_every_s > 0 else [])]
                        for n, s in zip(names, a.slowdowns)}
        for n in names:
            proxies[n] = Proxy(port)
            cluster.start_worker(n, proxies[n].port, worker_flags[n])
        t0 = time.time()
        while (now := time.time() - t0) < a.duration:
            for item in [r for r in recover if r[0] <= now]:
                recover.remove(item)
                _, n, kind = item
                if kind == "kill":
                    cluster.start_worker(n, proxies[n].port, worker_flags[n])
                elif kind == "stall":
                    cluster.workers[n].send_signal(signal.SIGCONT)
                else:
                    proxies[n].restore()
            while pending and pending[0][0] <= now:
                t, n, kind, down = pending.pop(0)
                if kind != "cut":  # a cut-off worker can still train: its time is up time
                    downtime[n] += min(down, a.duration - t)
                if kind == "kill":
                    cluster.workers[n].kill()
                elif kind == "stall":
                    cluster.workers[n].send_signal(signal.SIGSTOP)
                else:
                    proxies[n].cut()
                recover.append((t + down, n, kind))  # before this worker's next failure
            time.sleep(0.02)
        end(cluster, proxies, a.drain_s)
    finally:
        for p in cluster.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
        cluster.kill()
        for p in proxies.values():
            p.cut()
    stalls = {n: [(t, t + d) for t, m, kind, d in events if m == n and kind == "stall"] for n in names}
    return measure(a, cluster, names, t0, downtime, stalls)


def seconds_per_step(rounds, stalls):
    """A worker's mean seconds per step (its trained seconds over its steps) in the rounds no
    stall touched: [(when the round's line was logged, trained s, steps)], [(stall start, end)].
    A round's line is logged when its update lands, at most a round after its training ended
    (the exchange flies beside the next round), so one logged before a stall began or more than
    two rounds after it ended was trained outside it. The mean, not the median: step times on
    a loaded machine skew long, and the median made the capacity too high."""
    if not rounds:
        return None
    typical = statistics.median(s for _, s, _ in rounds)
    clean = [(s, k) for t, s, k in rounds if not any(a <= t <= b + 2 * typical + (b - a) for a, b in stalls)]
    clean = clean or [(s, k) for _, s, k in rounds]
    return sum(s for s, _ in clean) / sum(k for _, k in clean)


def measure(a, cluster, names, t0, downtime, stalls):
    server = open(cluster.log("server")).read()
    closes = [(stamp(ts) - t0, int(r), int(steps)) for ts, r, _, steps in CLOSE_RE.findall(server)]
    merged, cum = 0, {}
    for _, r, steps in closes:
        merged += steps
        cum[r + 1] = merged  # the model of round r + 1 holds this many merged steps
    evals = {}
    step_s, landed = {}, 0
    for n in names:
        text = open(cluster.log(n)).read()
        for ts, r, v in EVAL_RE.findall(text):
            t = stamp(ts) - t0
            if t <= a.duration and (int(r) not in evals or t < evals[int(r)][0]):
                evals[int(r)] = (t, float(v))
        rounds = [(stamp(ts) - t0, float(s), int(k or a.inner_steps) + int(extra or 0))  # the steps it trained
                  for ts, s, k, extra in TRAINED_RE.findall(text)]
        step_s[n] = seconds_per_step([r for r in rounds if r[0] <= a.duration], stalls[n])
        landed += sum(k for _, _, k in rounds) + sum(int(k) for k in PARTING_RE.findall(text))
    gaps = [b[0] - a_[0] for a_, b in zip(closes, closes[1:])]
    return {"closes": len(closes), "merged_steps": merged, "landed_steps": landed, "step_s": step_s, "downtime": downtime,
            "evals": sorted((r, t, v, cum.get(r, 0)) for r, (t, v) in evals.items()),
            "longest_wait_s": max(gaps) if gaps else None}


def loss_at(run_, tokens):
    """The mean validation loss of the last three evaluated models holding at most `tokens`
    merged steps (one evaluation swings by a few percent from version to version)."""
    losses = [v for _, _, v, c in run_["evals"] if c <= tokens][-3:]
    return statistics.mean(losses) if losses else None


def fmt(x, form, scale=1):
    return "-" if x is None else form % (scale * x)


def report(a, runs, out):
    # Each worker's seconds per step, failure-free: from the async run (never waiting), else
    # the sync run's (a worker none of whose async pushes counted has no measure there).
    speed = {n: runs["async"]["step_s"][n] or runs["sync"]["step_s"][n] for n in runs["async"]["step_s"]}
    if not all(speed.values()):
        raise RuntimeError(f"no step time measured for some workers: {speed}")
    target = loss_at(runs["sync"], float("inf")) or 0.0
    lines = [f"chaos: {len(a.slowdowns)} workers throttled {a.slowdowns}, H = {a.inner_steps}"
             f"{' (async: --adaptive_h)' if a.adaptive_h else ''}, {a.duration:.0f} s per run, "
             f"MTBF {a.mtbf_rounds} rounds per worker, seed {a.seed}, "
             + (f"local training saved every {a.state_every_s:g} s" if a.state_every_s > 0 else "no --state_file"),
             f"a fastest worker's round: {a.round_s:.2f} s; {len(a.events)} failures scheduled ("
             + ", ".join(f"{sum(e[2] == k for e in a.events)} {k}" for k in ("kill", "stall", "cut")) + "): "
             + ", ".join(f"{n} {k} at {t:.1f} s for {d:.1f} s" for t, n, k, d in a.events[:12])
             + (", ..." if len(a.events) > 12 else ""),
             "",
             "| run | rounds | steps merged | goodput (all time) | goodput (up time) | time to the target "
             "| loss at equal tokens | vs failure-free | longest wait between closes |",
             "|---|---|---|---|---|---|---|---|---|"]
    table = {}
    for key, r in runs.items():
        mode = key.split("-")[0]
        # Each run's own speeds (a loaded machine slows every run differently), else the fallback.
        own = {n: r["step_s"].get(n) or speed[n] for n in speed}
        possible = sum(a.duration / own[n] for n in own)
        up = sum((a.duration - r["downtime"][n]) / own[n] for n in own)
        smooth = [(t, statistics.mean(v for _, _, v, _ in r["evals"][max(0, i - 2):i + 1]))
                  for i, (_, t, _, _) in enumerate(r["evals"])]
        reached = next((t for t, v in smooth if v <= target), None)
        ref = runs[mode]
        tokens = min(run_["evals"][-1][3] if run_["evals"] else 0 for run_ in (r, ref))
        loss, ref_loss = loss_at(r, tokens), loss_at(ref, tokens)
        row = {"rounds": r["closes"], "merged_steps": r["merged_steps"], "goodput": r["merged_steps"] / possible,
               "goodput_up": r["merged_steps"] / up, "time_to_target_s": reached, "loss_at_equal_tokens": loss,
               "vs_failure_free": loss / ref_loss - 1 if loss and ref_loss else None,
               "longest_wait_s": r["longest_wait_s"]}
        row["landed_share_up"] = r["landed_steps"] / up  # steps trained in rounds whose exchange ended well
        row["merged_share_landed"] = r["merged_steps"] / max(1, r["landed_steps"])
        table[key] = row
        lines.append(f"| {key} | {row['rounds']} | {row['merged_steps']} | {100 * row['goodput']:.1f}% | "
                     f"{100 * row['goodput_up']:.1f}% | {'%.1f s' % reached if reached else 'not reached'} | "
                     f"{fmt(loss, '%.4f')} | {fmt(row['vs_failure_free'], '%+.2f%%', 100)} | "
                     f"{fmt(row['longest_wait_s'], '%.2f s')} |")
    lines.append("\nwhere the up time went (goodput over up time = the first share x the second): " + "; ".join(
        f"{k}: the rounds that landed hold {100 * t['landed_share_up']:.1f}% of the steps the workers could take "
        f"while up (the rest: restarts, waits, rounds lost to kills or refused), the model merged "
        f"{100 * t['merged_share_landed']:.1f}% as many" for k, t in table.items() if k.endswith("chaos"))
        + " (over 100%: pushes merged whose worker died before their update landed)")
    ceiling = {k: t["goodput_up"] / table[k.split("-")[0]]["goodput"] for k, t in table.items() if k.endswith("chaos")}
    lines.append("\ngoodput over up time against the same mode's failure-free run's: " + "; ".join(f"{k} {100 * v:.1f}%" for k, v in ceiling.items()))
    lines.append(f"\nthe target: the failure-free sync run's final validation loss, {target:.4f} (mean of its last three "
                 "evaluations; a run reaches it when the mean of its last three does)")
    text = "\n".join(lines)
    print(text)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "chaos.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "chaos.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(a).items() if k not in ("events",)}, "events": a.events,
                   "runs": runs, "table": table}, f, indent=1)
    plot(runs, out)


def plot(runs, out):
    if not shutil.which("gnuplot"):
        print("chaos: gnuplot not found (apt-get install gnuplot-nox): no plot", file=sys.stderr)
        return
    data = os.path.join(out, "chaos.dat")
    with open(data, "w") as f:
        for key, r in runs.items():
            f.write(f'"{key}"\n' + "".join(f"{t:.2f} {v:.4f}\n" for _, t, v, _ in r["evals"]) + "\n\n")
    png = os.path.join(out, "chaos.png")
    script = (f"set terminal png size 1000,600; set output '{png}'; set grid; set key top right; "
              "set xlabel 'wall time (s)'; set ylabel 'validation loss'; "
              f"plot for [i=0:{len(runs) - 1}] '{data}' index i using 1:2 with linespoints title columnheader(1)")
    subprocess.run(["gnuplot", "-e", script], check=True)
    os.remove(data)
    print(f"plot: {png}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--slowdowns", default="2,2,4,8", help="each worker's throttle (muloco-worker --slowdown)")
    p.add_argument("--inner_steps", type=int, default=100)
    p.add_argument("--eval_every", type=int, default=1,
                   help="rounds between evaluations (an async worker evaluates only the versions it lands on)")
    p.add_argument("--duration", type=float, default=150)
    p.add_argument("--mtbf_rounds", type=float, default=5)
    p.add_argument("--round_timeout_s", type=float, default=10, help="the server's straggler deadline and eviction time")
    p.add_argument("--adaptive_h", action=argparse.BooleanOptionalAction, default=True,
                   help="async runs with muloco-server --adaptive_h (per-worker H from their speeds)")
    p.add_argument("--state_every_s", type=float, default=0.2,
                   help="workers save their local training this often (muloco-worker --state_file) and a killed one "
                        "resumes it: 0.2 s is a tenth of a fastest worker's round here, as a worker's default 30 s is of "
                        "rounds of minutes; 0: off (a kill loses the training since the last push)")
    p.add_argument("--drain_s", type=float, default=40,
                   help="at the end, how long the stopped workers get to push what they trained and leave")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "chaos"))
    p.add_argument("--logs", default=None)
    p.add_argument("server_flags", nargs="*")
    a = p.parse_args()
    a.slowdowns = [float(s) for s in a.slowdowns.split(",")]
    logs = a.logs or tempfile.mkdtemp(prefix="muloco_chaos_")
    print(f"chaos: logs in {logs}", flush=True)
    runs = {"async": run(a, "async", [], os.path.join(logs, "async"))}
    fast = [runs["async"]["step_s"][f"w{i}"] for i, s in enumerate(a.slowdowns) if s == min(a.slowdowns)]
    a.round_s = a.inner_steps * statistics.median(x for x in fast if x)
    a.events = schedule(a, [f"w{i}" for i in range(len(a.slowdowns))], a.round_s)
    runs["sync"] = run(a, "sync", [], os.path.join(logs, "sync"))
    runs["async-chaos"] = run(a, "async", a.events, os.path.join(logs, "async-chaos"))
    runs["sync-chaos"] = run(a, "sync", a.events, os.path.join(logs, "sync-chaos"))
    report(a, runs, a.out)


if __name__ == "__main__":
    main()
