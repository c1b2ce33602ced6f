#!/usr/bin/python3
"""deploy/wan/run.py: the WAN comparison benchmark (run as root). Runs one muloco-server and K
workers, each in its own network namespace joined to the server's by a tbf-shaped veth link
(deploy/wan/netns.sh), and compares dense DiLoCo, MuLoCo 2-bit (error feedback down), SignMuon
and MuLoCo 2-bit with --overlap on wall time per round (compute / blocked on the server /
push), time to a target validation loss and bytes up and down.

The link rate is not picked by hand: for each scenario (a 1B-parameter model on one H100 per
site over 1 Gbit/s between datacenters, over 100 Mbit/s for volunteers, or over a home link of
100 Mbit/s down and 20 up) it computes the ratio of dense fp32 communication time to compute
time per round, measures this machine's compute time per round for the small test model (a
short unshaped calibration run), and shapes the links, in the real link's down/up proportion,
so that the small model's dense payload gives the same ratio.

  deploy/wan/run.py                                  # every scenario, all methods (~15-20 min on 2 cores)
  deploy/wan/run.py --rounds 3 --scenario volunteer --methods dense,muloco-2bit
See deploy/wan/README.md.
"""
import argparse
import csv
import os
import re
import shutil
import shlex
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from gpt_layout import param_count  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "../.."))
NETNS = os.path.join(HERE, "netns.sh")
PORT = 7070           # inside the server namespace: nothing else listens there
METRICS_PORT = 9090   # the server's metrics, on the server namespace's loopback only

# method name -> (server preset and flags, worker flags, rounds multiplier is H for SignMuon)
METHODS = {
    "dense": dict(label="dense DiLoCo (fp32)", preset="diloco"),
    "muloco-2bit": dict(label="MuLoCo 2-bit (EF down)", preset="muloco-2bit"),
    "signmuon": dict(label="SignMuon (1-bit vote)", preset="signmuon"),
    "muloco-2bit-overlap": dict(label="MuLoCo 2-bit (EF down) --overlap", preset="muloco-2bit", overlap=True),
}

SCENARIOS = {  # name -> (description, flag of the downlink Mbit/s, flag of the uplink Mbit/s)
    "datacenter": ("two datacenters, one H100 each, 1 Gbit/s between them", "dc_mbit", "dc_mbit"),
    "volunteer": ("volunteers, one H100 each, 100 Mbit/s symmetric links", "volunteer_mbit", "volunteer_mbit"),
    "home": ("volunteers, one H100 each, home links 100 Mbit/s down, 20 up", "home_down_mbit", "home_up_mbit"),
}

# ---------------------------------------------------------------- processes and cleanup

_procs = []  # every child started (each in its own session: killed by process group)


def kill_all():
    for p in _procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    _procs.clear()


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds into the finally blocks: children killed, namespaces removed


def netns(*args, check=True, quiet=False):
    r = subprocess.run([NETNS, *map(str, args)], capture_output=True, text=True)
    if not quiet and r.stdout.strip():
        print(r.stdout.rstrip())
    if check and r.returncode != 0:
        raise RuntimeError(f"netns.sh {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def spawn(ns, argv, log_path):
    log = open(log_path, "w")
    p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    log.close()
    _procs.append(p)
    return p


# ---------------------------------------------------------------- log parsing

def stamp(line):
    return datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


ROUND_RE = re.compile(r"round (\d+): train_loss ([\d.naif-]+), up (\d+) bytes .*?down (\d+) bytes .*?contributors"
                      r"(?:, trained ([\d.]+) s, waited ([\d.]+) s)?, checksum ([0-9a-f]+) ok")
EVAL_RE = re.compile(r"eval: round (\d+) val_loss ([\d.]+)")
DEFERRED_RE = re.compile(r"eval: round (\d+) deferred to (\S+)")  # --defer_eval: the model, written when it landed
FINAL_RE = re.compile(r"final: val_loss ([\d.]+) \(start ([\d.]+)\) after (\d+) rounds; up (\d+) bytes, "
                      r"down (\d+) bytes; checksum ([0-9a-f]+)")
MODEL_RE = re.compile(r"(?:fetched|built) model at round \d+ \((\d+) parameters\)")  # the worker has θ_pub
SUMMARY_RE = re.compile(r"summary: wall time\s+([\d.]+) s \(([\d.]+) s training(?:, ([\d.]+) s waiting)?")


def parse_worker(text):
    w = dict(rounds=[], evals=[], deferred=[], joined=None, fetched=None, params=None, final=None, train_total=None,
             wait_total=None)
    for line in text.splitlines():
        if w["joined"] is None and " joined " in line:
            w["joined"] = stamp(line)
        elif w["fetched"] is None and (m := MODEL_RE.search(line)):
            w["fetched"], w["params"] = stamp(line), int(m[1])
        elif m := ROUND_RE.search(line):
            w["rounds"].append(dict(t=stamp(line), round=int(m[1]), up=int(m[3]), down=int(m[4]),
                                    trained=float(m[5]) if m[5] else None,
                                    waited=float(m[6]) if m[6] else None, checksum=m[7]))
        elif m := EVAL_RE.search(line):
            w["evals"].append((stamp(line), int(m[1]), float(m[2])))
        elif m := DEFERRED_RE.search(line):
            w["deferred"].append((stamp(line), int(m[1]), m[2]))
        elif m := FINAL_RE.search(line):
            w["final"] = dict(t=stamp(line), val=float(m[1]), start=float(m[2]), rounds=int(m[3]), up=int(m[4]), down=int(m[5]),
                              checksum=m[6])
        elif m := SUMMARY_RE.search(line):
            w["train_total"] = float(m[2])
            w["wait_total"] = float(m[3]) if m[3] else None
    return w


def metric(text, name):
    m = re.search(rf"^{name} ([\d.e+-]+)$", text or "", re.M)
    return float(m[1]) if m else None


class Scraper(threading.Thread):
    """Keeps the server's latest /metrics (scraped on the server namespace's loopback): the
    push durations are measured there, and the server exits soon after the last worker leaves."""

    def __init__(self, ns, proc):
        super().__init__(daemon=True)
        self.ns, self.proc, self.text = ns, proc, None
        url = f"http://127.0.0.1:{METRICS_PORT}/metrics"
        self.cmd = (["curl", "-s", "-m", "2", url] if shutil.which("curl") else
                    [sys.executable, "-c", f"import urllib.request as u; print(u.urlopen('{url}', timeout=2).read().decode())"])

    def run(self):
        while self.proc.poll() is None:
            r = subprocess.run(["ip", "netns", "exec", self.ns, *self.cmd], capture_output=True, text=True)
            if r.returncode == 0 and "muloco_push_duration_seconds_count" in r.stdout:
                self.text = r.stdout
            time.sleep(0.5)


# ---------------------------------------------------------------- one run

def run_method(a, tag, name, method, k, rounds, rates, logdir, overlap_ok):
    """Runs the server and k workers to the end of the run; returns the parsed outcome."""
    os.makedirs(logdir, exist_ok=True)
    signmuon = method["preset"] == "signmuon"
    h = 1 if signmuon else a.inner_steps
    n_rounds = rounds * a.inner_steps if signmuon else rounds  # same inner steps (tokens) for every method
    server_flags = [f"--preset={method['preset']}", f"--rounds={n_rounds}", f"--eval_batches={a.eval_batches}",
                    f"--eval_every={a.inner_steps if signmuon else 1}", "--linger_s=30", "--round_timeout_s=600",
                    "--heartbeat_timeout_s=120", "--idle_timeout_s=300"]
    if not signmuon:
        server_flags.append(f"--inner_steps={h}")
    server_flags += shlex.split(a.server_flags)  # e.g. a larger model
    worker_flags = ["--progress_s=0", "--heartbeat_s=5", "--stall_timeout_s=120"]
    overlap = bool(method.get("overlap"))
    if overlap and overlap_ok:
        worker_flags.append("--overlap")
    sns = f"mwan-s-{tag}"
    server = spawn(sns, [a.server_bin, f"--listen=0.0.0.0:{PORT}", "--insecure", "--open_join",
                         f"--metrics_listen=127.0.0.1:{METRICS_PORT}", *server_flags],
                   os.path.join(logdir, "server.log"))
    deadline = time.time() + 30
    while "serving on port" not in open(os.path.join(logdir, "server.log")).read():
        if server.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"{name}: server did not start:\n{open(os.path.join(logdir, 'server.log')).read()}")
        time.sleep(0.05)
    scraper = Scraper(sns, server)
    scraper.start()
    t0 = time.time()
    workers = []
    for i in range(k):
        addr = netns("addr", tag, f"w{i}", quiet=True).stdout.strip()
        deferred = [] if a.eval_in_run else [f"--defer_eval={os.path.join(logdir, f'w{i}-models')}"]
        workers.append(spawn(f"mwan-w{i}-{tag}", [a.worker_bin, f"--server={addr}:{PORT}", "--insecure",
                                                   f"--name=w{i}", *worker_flags, *deferred],
                             os.path.join(logdir, f"w{i}.log")))
    # A generous bound: every round at dense payloads both ways, three times over, plus start-up.
    dense_comm = link_seconds(a.dense_bytes, a.dense_bytes, rates)
    timeout = 120 + 3 * rounds * ((a.compute_s or 30) + dense_comm + 2) + (3 * n_rounds if signmuon else 0)
    codes = []
    for p in workers:
        try:
            codes.append(p.wait(timeout=max(1, timeout - (time.time() - t0))))
        except subprocess.TimeoutExpired:
            codes.append(None)
    try:
        codes.append(server.wait(timeout=60))
    except subprocess.TimeoutExpired:
        codes.append(None)
    kill_all()
    wall = time.time() - t0
    scraper.join(timeout=5)
    ws = [parse_worker(open(os.path.join(logdir, f"w{i}.log")).read()) for i in range(k)]
    eval_error = None
    if ws[0]["deferred"]:
        try:
            ws[0]["evals"] = evaluate_deferred(a, ws[0]["deferred"], logdir)
        except RuntimeError as e:  # e.g. the worker could not write its models: the other rows still count
            eval_error = str(e)
    stext = open(os.path.join(logdir, "server.log")).read()
    m = re.search(r"final checksum ([0-9a-f]+)", stext)
    server_sum = m[1] if m else None
    push_n = metric(scraper.text, "muloco_push_duration_seconds_count")
    push_s = metric(scraper.text, "muloco_push_duration_seconds_sum")
    return dict(name=name, label=method["label"], overlap=overlap, overlap_used=overlap and overlap_ok,
                signmuon=signmuon, h=h, n_rounds=n_rounds, codes=codes, wall=wall, workers=ws,
                server_checksum=server_sum, push_mean=(push_s / push_n) if push_n else None, logdir=logdir,
                eval_error=eval_error)


def evaluate_deferred(a, deferred, logdir):
    """Evaluates the models worker 0 wrote at its evaluation rounds (--defer_eval), after the
    run: [(when it had the model, round, val loss)], as its own evaluations would have given
    (the run's configuration is the one the worker wrote beside them)."""
    paths = [path for _, _, path in deferred]
    if not os.path.exists(os.path.join(os.path.dirname(paths[0]), "run_config.txtpb")):
        raise RuntimeError(f"{logdir}: worker 0 wrote no run_config.txtpb beside its models (see w0.log)")
    r = subprocess.run([a.worker_bin, f"--evaluate={','.join(paths)}"],
                       capture_output=True, text=True)
    with open(os.path.join(logdir, "evaluate.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    vals = {m[1]: float(m[2]) for m in re.finditer(r"^(\S+) val_loss ([\d.]+)$", r.stdout, re.M)}
    if r.returncode != 0 or len(vals) != len(paths):
        raise RuntimeError(f"evaluating {logdir}'s models failed; see {logdir}/evaluate.log")
    return [(t, rnd, vals[path]) for t, rnd, path in deferred]


def link_seconds(up_bytes, down_bytes, rates):
    """Seconds to send up_bytes up and then down_bytes down at rates (down, up) Mbit/s (0: unshaped)."""
    down, up = rates
    return (up_bytes * 8 / (up * 1e6) if up > 0 else 0) + (down_bytes * 8 / (down * 1e6) if down > 0 else 0)


def rates_text(rates):
    """"R" for R Mbit/s each way, "D/U" for D down and U up."""
    down, up = rates
    return f"{down:.3f}" if down == up else f"{down:.3f}/{up:.3f}"


def summarize(r, target, rates):
    """One table row from a run's logs (worker w0 for the timeline; every worker for agreement)."""
    w0 = r["workers"][0]
    rounds = w0["rounds"]
    n = len(rounds)
    row = dict(method=r["label"], link_mbit=rates_text(rates), rounds=n, steps_per_round=r["h"],
               exit_ok=all(c == 0 for c in r["codes"]))
    finals = [w["final"]["checksum"] if w["final"] else None for w in r["workers"]]
    row["replicas_agree"] = bool(r["server_checksum"]) and all(c == r["server_checksum"] for c in finals)
    if not n or w0["fetched"] is None:
        row["note"] = f"no rounds completed (see {r['logdir']})"
        return row
    start = min(w["joined"] for w in r["workers"] if w["joined"])
    round_s = (rounds[-1]["t"] - w0["fetched"]) / n
    trained = [x["trained"] for x in rounds if x["trained"] is not None]
    waited = [x["waited"] for x in rounds if x["waited"] is not None]
    compute = sum(trained) / len(trained) if trained else (w0["train_total"] or 0) / n
    row.update(round_s=round_s, compute_s=compute,
               waited_s=(sum(waited) / len(waited)) if waited else None,
               push_s=r["push_mean"],
               s_per_step=round_s / r["h"],
               up_bytes=w0["final"]["up"] if w0["final"] else sum(x["up"] for x in rounds),
               down_bytes=w0["final"]["down"] if w0["final"] else sum(x["down"] for x in rounds),
               ideal_comm_s=link_seconds(rounds[-1]["up"], rounds[-1]["down"], rates),
               final_val=w0["final"]["val"] if w0["final"] else (w0["evals"][-1][2] if w0["evals"] else None),
               wall_s=(w0["final"]["t"] if w0["final"] else rounds[-1]["t"]) - start)
    if row["waited_s"] is not None:
        row["other_s"] = round_s - compute - row["waited_s"]  # evaluation, encoding, rebasing
    # Seconds from the first join and val loss of each evaluated model. Only trained models
    # count: the initial model (round 0) never reaches a target.
    row["curve"] = [(t - start, rnd, v) for t, rnd, v in w0["evals"] if rnd >= 1]
    if target is not None:
        hit = first_hit(row["curve"], target)
        row["target_val"] = target
        row["time_to_target_s"] = hit[0] if hit else None
        row["steps_to_target"] = hit[1] * r["h"] if hit else None
    notes = []
    if r["overlap"] and not r["overlap_used"]:
        notes.append("overlap: not available in this build")
    if not row["exit_ok"]:
        notes.append(f"exit codes {r['codes']}")
    if r.get("eval_error"):
        notes.append(r["eval_error"])
    if not row["replicas_agree"]:
        notes.append(f"checksums differ: server {r['server_checksum']} workers {finals}")
    row["note"] = "; ".join(notes)
    return row


COLUMNS = ["scenario", "method", "link_mbit", "rounds", "steps_per_round", "round_s", "compute_s", "waited_s",
           "push_s", "other_s", "ideal_comm_s", "s_per_step", "final_val", "target_val", "time_to_target_s",
           "steps_to_target", "wall_s", "up_bytes", "down_bytes", "exit_ok", "replicas_agree", "note"]


DEPTHS = (1.05, 1.02, 1.01, 1.00)


def first_hit(curve, target):
    """(seconds, round) of the first model of `curve` at or below `target`, or None."""
    return next(((t, rnd) for t, rnd, v in curve if v <= target), None)


def depth_table(rows, dense_finals):
    """Time to target at several depths (dense DiLoCo's final val loss x DEPTHS), and each
    method's ratio to dense there: the ratio depends on how deep the target is."""
    for s, final in dense_finals.items():
        srows = [r for r in rows if r["scenario"] == s and r.get("curve")]
        dense = next((r for r in srows if r["method"] == METHODS["dense"]["label"]), None)
        if dense is None:
            continue
        print(f"\n{s}: seconds to target (round reached) and ratio to dense DiLoCo, targets dense final "
              f"{final:.4f} x {', '.join(f'{d:g}' for d in DEPTHS)}")
        for r in srows:
            cells = []
            for d in DEPTHS:
                hit, base = first_hit(r["curve"], final * d), first_hit(dense["curve"], final * d)
                cells.append("not reached" if hit is None else
                             f"{hit[0]:6.1f} s r{hit[1]:<3} {base[0] / hit[0]:5.2f}x" if base else f"{hit[0]:6.1f} s r{hit[1]}")
            print(f"  {r['method']:<32} " + " | ".join(f"{c:<21}" for c in cells))


def fmt(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def print_table(rows):
    print()
    head = (f"{'scenario':<10} {'method':<32} {'Mbit/s':>11} {'rnds':>4} {'H':>3} {'round s':>8} {'compute':>8} "
            f"{'waited':>7} {'push':>6} {'other':>6} {'ideal':>6} {'s/step':>7} {'final val':>9} "
            f"{'to target s':>11} {'MB up':>7} {'MB down':>8} {'ok':>3}  note")
    print(head)
    print("-" * len(head))
    for r in rows:
        mb = lambda b: f"{b / 1e6:.3f}" if b is not None else "-"
        ttt = fmt(r.get("time_to_target_s"), 1) if r.get("target_val") is not None else "-"
        if r.get("target_val") is not None and r.get("time_to_target_s") is None:
            ttt = "not reached"
        ok = "yes" if r.get("exit_ok") and r.get("replicas_agree") else "NO"
        print(f"{r['scenario']:<10} {r['method']:<32} {fmt(r.get('link_mbit')):>11} {fmt(r.get('rounds')):>4} "
              f"{fmt(r.get('steps_per_round')):>3} {fmt(r.get('round_s')):>8} {fmt(r.get('compute_s')):>8} "
              f"{fmt(r.get('waited_s')):>7} {fmt(r.get('push_s')):>6} {fmt(r.get('other_s')):>6} "
              f"{fmt(r.get('ideal_comm_s')):>6} {fmt(r.get('s_per_step'), 3):>7} {fmt(r.get('final_val'), 4):>9} "
              f"{ttt:>11} {mb(r.get('up_bytes')):>7} {mb(r.get('down_bytes')):>8} {ok:>3}  {r.get('note', '')}")
    print()
    print("Mbit/s: the link rate each way (down/up when they differ); round s: wall time per round (w0, from the model fetch to its last round); compute: inner steps; "
          "waited: training blocked on the server (push, the other workers, aggregation, downlink); push: mean "
          "PushUpdate time at the server (uplink transfer); other: the rest (evaluation, encoding); ideal: the "
          "round's payloads up + down at the link rate; s/step: round s / H; to target: from the first join to "
          "the moment worker 0 had the first model whose val loss is at or below the target (evaluated after the run "
          "from the models it wrote then, --defer_eval; with --eval_in_run: the end of its evaluation in the run, which then "
          "counts in the round's time, inside compute with --overlap); wall: first join to the final evaluation; MB up/down: per worker, round payloads only "
          "(the initial dense model fetch is extra).")


# ---------------------------------------------------------------- scenario arithmetic

def real_scenario(a, rates):
    tokens_per_s = a.gpu_tflops * 1e12 * a.mfu / (6 * a.real_params)
    compute_s = a.real_inner_steps * a.real_tokens_per_step / tokens_per_s
    dense_bytes = a.real_params * 4
    comm_s = link_seconds(dense_bytes, dense_bytes, rates)  # push, then receive the update, each at its rate
    return dict(tokens_per_s=tokens_per_s, compute_s=compute_s, comm_s=comm_s, ratio=comm_s / compute_s)


def small_rates(a, ratio, real_rates):
    """tbf rates (down, up) in Mbit/s, in the real link's proportion, at which the small model's dense
    round (up, then down) takes ratio x compute."""
    down, up = real_rates
    scale = link_seconds(a.dense_bytes, a.dense_bytes, real_rates) / (ratio * a.compute_s)
    return down * scale, up * scale


def calibrate(a, tag, outdir, overlap_ok):
    """Compute seconds per round of the dense method here, K workers, unshaped links."""
    netns("shape", tag, 0, quiet=True)
    r = run_method(a, tag, "calibration", METHODS["dense"], a.workers, a.calibration_rounds, (0, 0),
                   os.path.join(outdir, "logs", "calibration"), overlap_ok)
    per_round = []
    for w in r["workers"]:
        tr = [x["trained"] for x in w["rounds"] if x["trained"] is not None]
        if tr:
            per_round.append(sum(tr) / len(tr))
        elif w["train_total"] and w["rounds"]:
            per_round.append(w["train_total"] / len(w["rounds"]))
    if not per_round or any(c != 0 for c in r["codes"]):
        raise RuntimeError(f"calibration run failed (exit codes {r['codes']}); logs in {r['logdir']}")
    return sum(per_round) / len(per_round), r["workers"][0]["params"]


# ---------------------------------------------------------------- main

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="all", help=f"all, or comma-separated, of {', '.join(SCENARIOS)}")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--rounds", type=int, default=6, help="outer rounds (SignMuon: rounds x H one-step rounds)")
    p.add_argument("--inner_steps", type=int, default=20, help="H of the small-model runs")
    p.add_argument("--workers", type=int, default=2, help="K")
    p.add_argument("--eval_batches", type=int, default=8)
    p.add_argument("--eval_in_run", action="store_true",
                   help="evaluate inside the run, as before deferred evaluation existed (the evaluations then take training time); default: "
                        "the workers write the models (--defer_eval) and they are evaluated after the run")
    p.add_argument("--out", default="/tmp/muloco-wan", help="CSV and logs go here")
    p.add_argument("--build", default=os.environ.get("MULOCO_BUILD", os.path.join(REPO, "build")))
    p.add_argument("--calibration_rounds", type=int, default=2)
    p.add_argument("--server_flags", default="",
                   help='muloco-server flags for every run, e.g. "--d_model=192 --n_layer=3" (a model whose dense transfer '
                        'takes over a minute on the volunteer link); the workers get the run configuration from the server, '
                        'and the evaluation of their models from the file they wrote beside them')
    p.add_argument("--compute_s", type=float, default=None,
                   help="compute seconds per round of the small model (skips the calibration run)")
    p.add_argument("--target", type=float, default=None,
                   help="target val loss (default: dense DiLoCo's final val loss x 1.02, per scenario)")
    g = p.add_argument_group("the real scenario")
    g.add_argument("--real_params", type=float, default=1e9)
    g.add_argument("--gpu_tflops", type=float, default=989, help="H100 SXM dense bf16 peak")
    g.add_argument("--mfu", type=float, default=0.40)
    g.add_argument("--real_inner_steps", type=int, default=100)
    g.add_argument("--real_tokens_per_step", type=int, default=64 * 2048, help="64 sequences of 2048 tokens")
    g.add_argument("--dc_mbit", type=float, default=1000)
    g.add_argument("--volunteer_mbit", type=float, default=100)
    g.add_argument("--home_down_mbit", type=float, default=100)
    g.add_argument("--home_up_mbit", type=float, default=20, help="cable and DSL plans upload at a fifth "
                   "to a tenth of their download rate")
    a = p.parse_args()

    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            p.error(f"unknown method {m} (known: {', '.join(METHODS)})")
    scenarios = list(SCENARIOS) if a.scenario == "all" else [x.strip() for x in a.scenario.split(",") if x.strip()]
    for x in scenarios:
        if x not in SCENARIOS:
            p.error(f"unknown scenario {x} (known: {', '.join(SCENARIOS)})")
    if os.geteuid() != 0:
        sys.exit("run.py: run as root (network namespaces)")
    a.dense_bytes = 0  # known after the calibration
    a.server_bin = os.path.join(a.build, "muloco-server")
    a.worker_bin = os.path.join(a.build, "muloco-worker")
    for b in (a.server_bin, a.worker_bin):
        if not os.access(b, os.X_OK):
            sys.exit(f"run.py: {b} missing (build first, or --build DIR)")
    help_text = subprocess.run([a.worker_bin, "--help"], capture_output=True, text=True).stdout
    overlap_ok = "--overlap" in help_text
    os.makedirs(a.out, exist_ok=True)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    tag = f"run{os.getpid()}"
    rows = []
    dense_finals = {}  # scenario: dense DiLoCo's final val loss
    t_start = time.time()
    try:
        netns("up", tag, a.workers, 0)
        # ---- the scenario
        print("\n== Scenario and assumptions")
        print(f"real model: {a.real_params / 1e9:g}B parameters, dense fp32 payload {a.real_params * 4 / 1e9:g} GB each way "
              f"per round; training cost 6*N = {6 * a.real_params:.3g} FLOPs per token")
        print(f"one GPU per site: {a.gpu_tflops:g} TFLOP/s peak (H100 SXM bf16 dense) at {a.mfu:.0%} MFU; "
              f"H = {a.real_inner_steps} inner steps of {a.real_tokens_per_step} tokens")
        real = {}
        real_rates = {s: (getattr(a, SCENARIOS[s][1]), getattr(a, SCENARIOS[s][2])) for s in scenarios}
        for s in scenarios:
            real[s] = real_scenario(a, real_rates[s])
            x = real[s]
            print(f"  {s:<10} {SCENARIOS[s][0]}: {x['tokens_per_s']:.0f} tokens/s -> compute {x['compute_s']:.0f} s "
                  f"per round; dense up + down at {rates_text(real_rates[s])} Mbit/s {x['comm_s']:.0f} s; "
                  f"comm/compute = {x['ratio']:.3f}")
        # ---- calibration
        if a.compute_s is None:
            print(f"\n== Calibration: dense DiLoCo, {a.workers} workers, {a.calibration_rounds} rounds of H={a.inner_steps}, "
                  "links unshaped")
            a.compute_s, n_params = calibrate(a, tag, a.out, overlap_ok)
        else:
            out = subprocess.run([a.server_bin, "--preset=diloco", *shlex.split(a.server_flags), "--print_config"], capture_output=True, text=True).stdout
            n_params = None
        if n_params is None:  # --compute_s given: ask a baseline-free way, the model shape of the preset
            m = {k: int(v) for k, v in re.findall(r"(vocab_size|n_layer|d_model|context): (\d+)", out)}
            n_params = param_count(m["vocab_size"], m["n_layer"], m["d_model"], m["context"])
        a.dense_bytes = n_params * 4
        print(f"small model here: {n_params} parameters, dense payload {a.dense_bytes} bytes; compute "
              f"{a.compute_s:.2f} s per round (H={a.inner_steps}, {a.workers} workers on {os.cpu_count()} cores)")
        rates = {}
        for s in scenarios:
            rates[s] = small_rates(a, real[s]["ratio"], real_rates[s])
            print(f"  {s:<10} tbf rate {rates_text(rates[s])} Mbit/s: dense up + down "
                  f"{link_seconds(a.dense_bytes, a.dense_bytes, rates[s]):.2f} s per round = {real[s]['ratio']:.3f} x compute")
        if not overlap_ok and "muloco-2bit-overlap" in methods:
            print("note: muloco-worker --help does not list --overlap: that row runs without it")
        # ---- the runs
        for s in scenarios:
            print(f"\n== {s}: links at {rates_text(rates[s])} Mbit/s (each way, or down/up)")
            netns("shape", tag, f"{rates[s][0]:.4f}", f"{rates[s][1]:.4f}", quiet=True)
            target = a.target
            for name in sorted(methods, key=lambda m: m != "dense"):  # dense first: it sets the target
                t = time.time()
                r = run_method(a, tag, name, METHODS[name], a.workers, a.rounds, rates[s],
                               os.path.join(a.out, "logs", f"{s}-{name}"), overlap_ok)
                fin = r["workers"][0]["final"]
                if name == "dense" and fin:
                    dense_finals[s] = fin["val"]
                    if a.target is None:
                        target = fin["val"] * 1.02
                        print(f"  target val loss for {s}: {target:.4f} (dense final {fin['val']:.4f} x 1.02)")
                row = summarize(r, target, rates[s])
                row["scenario"] = s
                rows.append(row)
                print(f"  {r['label']:<32} {time.time() - t:6.1f} s: round {fmt(row.get('round_s'))} s, final val "
                      f"{fmt(row.get('final_val'), 4)} {row.get('note', '')}")
            if target is None:
                print("  (no target: dense DiLoCo was not run; give --target)")
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        kill_all()
        netns("down", tag, check=False, quiet=True)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        if f"-{tag}" in left:
            print(f"run.py: WARNING: namespaces of {tag} are left; remove with {NETNS} down {tag}", file=sys.stderr)
    if rows:
        print_table(rows)
        depth_table(rows, dense_finals)
        path = os.path.join(a.out, "wan.csv")
        with open(path, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            wr.writeheader()
            for r in rows:
                wr.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
        print(f"CSV: {path}; logs: {os.path.join(a.out, 'logs')}; total {time.time() - t_start:.0f} s")
    return 0 if rows and all(r.get("exit_ok") and r.get("replicas_agree") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
