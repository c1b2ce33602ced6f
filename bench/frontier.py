#!/usr/bin/env python3
"""The loss-against-bytes frontier: one table of methods (bench/README.md, "Frontier").

Trains the same model (--setting: by default the presets' byte GPT on Debian's fortunes; a
LLaMA on SentencePiece tokens of --text with llama-10m) with K real workers
against a real muloco-server on loopback, once per method, with the same inner steps and
tokens per worker, and reports per method: final validation loss, bits per parameter per
payload up and down (every header and table included), bytes per worker, the ratio to
DiLoCo's dense fp32 bytes, and wall time. Every payload size a worker logs is checked
against an independent computation of the wire format (codec/codec.h) from the codec spec
and the model's tensor shapes: a mismatch fails the run.

  bench/frontier.py [--build build] [--out bench/results] [--workers 4] [--rounds 10]
                    [--inner_steps 20] [--methods a,b,...] [--vary FLAG=V1,V2] [--seeds N] [--smoke]
                    [--setting gpt-bytes|llama-10m|llama-tiny] [--text FILE_OR_DIR]
                    [-- extra server flags for every method]

Writes OUT/frontier.txt (the table; OUT: bench/results, or bench/results/SETTING for the
other settings), OUT/frontier.csv (one row per method), OUT/frontier_curves.csv (validation
loss per evaluation with cumulative bytes) and, when gnuplot is installed, OUT/frontier_bytes.png and OUT/frontier_rounds.png. --smoke runs every
method for a few tiny rounds (the test suite's check: finite losses, exact bytes). --vary
runs a sweep: `--methods muloco --vary muon_weight_decay=0,0.01,0.1` trains one row per value.
--seeds N trains every row N times, each with another initial model and data order, and
reports the mean final loss with its sample standard deviation (sd) and every seed's value:
compressed rows move by a few tenths of a percent from run to run (which worker's payload
arrives first changes float sums in the last bit, and a 1- or 2-bit code turns that into
other codes), so a gap smaller than about 1% needs several seeds to be read.
"""
import argparse
import csv
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from gpt_layout import llama_shapes, tensor_shapes  # noqa: E402

# Settings: (description, server flags, BPE pieces or None for bytes). A setting on tokens runs
# muloco-prepare on --text once (OUT/shards) and gives every worker the shards.
SETTINGS = {
    "gpt-bytes": ("the presets' byte GPT (135,808 parameters) on the text's bytes", [], None),
    "llama-10m": ("a LLaMA of 10.0M parameters (d 320, 6 layers, 5 heads, context 64, batch 8) on 4096 BPE pieces",
                  ["--arch=llama", "--d_model=320", "--n_layer=6", "--n_head=5", "--context=64", "--batch_size=8"],
                  4096),
    "llama-tiny": ("a LLaMA of 45K parameters (d 32, 1 layer) on 512 BPE pieces (the smoke test's)",
                   ["--arch=llama", "--d_model=32", "--n_layer=1", "--n_head=2", "--context=32"], 512),
}

# Methods: (name, label, server flags). Every method trains R rounds of H inner steps per
# worker; the H = 1 methods run R * H rounds of one step (marked "steps"). The top-k rows keep
# outer lr 0.7 (lr 1.0, best for dense MuLoCo before 2026-12-05, cost them 5-8%) and momentum 0.4 (bench/README.md).
METHODS = [
    ("dp", "data-parallel (H=1, dense fp32)",
     ["--preset=diloco", "steps", "--outer_lr=1", "--outer_momentum=0", "--nesterov=false"]),
    ("diloco", "DiLoCo dense", ["--preset=diloco"]),
    ("diloco-2bit", "DiLoCo 2-bit+EF",
     ["--preset=diloco", "--uplink_codec=lloyd:bits=2,chunk=4096", "--downlink_codec=lloyd:bits=2,chunk=4096"]),
    ("muloco", "MuLoCo dense", ["--preset=muloco"]),
    # The preset codes the uplink without error feedback (its sweep: bench/README.md); the row
    # after it is the same with the feedback on both ways.
    ("muloco-2bit", "MuLoCo 2-bit, EF down (preset)", ["--preset=muloco-2bit"]),
    ("muloco-2bit-ef", "MuLoCo 2-bit+EF both ways", ["--preset=muloco-2bit", "--ef_beta=1"]),
    ("muloco-topk", "MuLoCo top-k+2-bit+EF",
     ["--preset=muloco", "--outer_lr=0.7", "--outer_momentum=0.4", "--uplink_codec=topk:chunk=4096,k=128,bits=2",
      "--downlink_codec=lloyd:bits=2,chunk=4096"]),
    ("signmuon", "SignMuon (H=1, 1-bit votes)", ["--preset=signmuon", "steps"]),
    # The best setting found within 1 bit per parameter up and 2 down (bench/README.md, sweeps).
    ("muloco-1bit", "MuLoCo <=1 bit up, <=2 down", ["--preset=muloco-1bit"]),
]

ROUND_RE = re.compile(r"round (\d+): train_loss (\S+), up (\d+) bytes .*?down (\d+) bytes")
EVAL_RE = re.compile(r"eval: round (\d+) val_loss (\S+)")
JOIN_RE = re.compile(r"joined .*?: (.*)$", re.M)
FINAL_RE = re.compile(r"final: .*; checksum ([0-9a-f]+)")
PARAMS_RE = re.compile(r"(?:fetched|built) model at round \d+ \((\d+) parameters\)")


# ---------------------------------------------------------------- the wire format, independently

def parse_codec(spec):
    name, _, rest = spec.partition(":")
    name = {"fp32": "dense-fp32", "bf16": "dense-bf16"}.get(name, name)
    c = dict(scheme=name, bits=1 if name == "sign" else 2, chunk=4096, k=32, ratio=0.0, keep=0.0, dense_vectors=True)
    for kv in filter(None, rest.split(",")):
        key, _, value = kv.partition("=")
        if key == "vectors":
            c["dense_vectors"] = value == "dense"
        elif key in ("ratio", "keep"):
            c[key] = float(value)
        else:
            c[key] = int(value)
    return c


def packed(n, bits):
    return (n * bits + 7) // 8


def payload_bytes(spec, shapes):
    """Exact payload size: 32-byte header, 32 bytes per segment, each segment's data."""
    c = parse_codec(spec)
    total = 32 + 32 * len(shapes)
    for _rows, n, vector in shapes:
        scheme = "dense-fp32" if vector and c["dense_vectors"] else c["scheme"]
        chunk = c["chunk"]
        keep_k = max(8, int(c["keep"] * chunk) // 8 * 8) if c["keep"] > 0 and scheme in ("quant", "lloyd", "linear") else 0
        if 0 < keep_k < chunk:  # a u32 seed; the kept elements coded as chunks of keep_k
            total += 4
            n, chunk = (n // chunk) * keep_k + min(keep_k, n % chunk), keep_k
        nc = -(-n // chunk)
        if scheme == "dense-fp32":
            total += 4 * n
        elif scheme == "dense-bf16":
            total += 2 * n
        elif scheme in ("quant", "lloyd"):
            total += nc * (1 << c["bits"]) * 4 + packed(n, c["bits"])
        elif scheme == "linear":
            total += nc * 8 + packed(n, c["bits"])
        elif scheme == "sign":
            total += nc * 4 + packed(n, 1)
        elif scheme == "topk":
            k = c["k"]
            if c["ratio"] > 0:
                chunk = 2
                while chunk < n and chunk < (1 << 24):
                    chunk *= 2
                k = int(min(max(math.floor(n * c["ratio"]), 1), chunk))
            kept = (n // chunk) * k + min(k, n % chunk)
            values = kept * 4 if c["bits"] == 32 else (1 << c["bits"]) * 4 + packed(kept, c["bits"])
            total += packed(kept, chunk.bit_length() - 1) + values
        else:
            raise ValueError(f"unknown scheme in {spec}")
    return total


# ---------------------------------------------------------------- one run

def wait_port(port_file, proc, log, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early:\n{open(log).read()[-3000:]}")
        if os.path.exists(port_file) and open(port_file).read().strip():
            return int(open(port_file).read())
        time.sleep(0.05)
    raise RuntimeError("server did not write its port")


def run_method(a, name, flags, logdir):
    """Runs a server and K workers to the end; returns the parsed outcome of worker 0."""
    os.makedirs(logdir, exist_ok=True)
    steps = "steps" in flags
    flags = [f for f in flags if f != "steps"]
    if steps:  # one inner step per round, as many rounds as the others' inner steps
        flags += ["--inner_steps=1", f"--rounds={a.rounds * a.inner_steps}",
                  f"--eval_every={a.inner_steps * a.eval_every}"]
    else:
        flags += [f"--inner_steps={a.inner_steps}", f"--rounds={a.rounds}", f"--eval_every={a.eval_every}"]
    if a.warmup_steps:
        flags.append(f"--warmup_steps={a.warmup_steps}")
    flags += [f"--eval_batches={a.eval_batches}", *a.extra]
    port_file = os.path.join(logdir, "port")
    if os.path.exists(port_file):
        os.remove(port_file)  # an interrupted run's port must not be read as this one's
    server_log = os.path.join(logdir, "server.log")
    procs = []
    t0 = time.time()
    try:
        server = subprocess.Popen([os.path.join(a.build, "muloco-server"), "--listen=127.0.0.1:0", "--insecure",
                                   "--open_join", f"--port_file={port_file}", f"--min_quorum={a.workers}",
                                   "--round_timeout_s=600", *flags],
                                  stdout=open(server_log, "w"), stderr=subprocess.STDOUT)
        procs.append(server)
        port = wait_port(port_file, server, server_log)
        for i in range(a.workers):
            procs.append(subprocess.Popen([os.path.join(a.build, "muloco-worker"), f"--server=127.0.0.1:{port}",
                                           "--insecure", f"--name=w{i}", "--threads=1", "--progress_s=0",
                                           *a.worker_flags],
                                          stdout=open(os.path.join(logdir, f"w{i}.log"), "w"),
                                          stderr=subprocess.STDOUT))
        for p in procs[1:] + procs[:1]:
            code = p.wait(timeout=a.timeout)
            if code != 0:
                raise RuntimeError(f"{name}: a process exited {code}; logs in {logdir}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.time() - t0
    # Every replica ends bit-identical to the server's model (the checksums of the final round).
    finals = {re.search(r"final checksum ([0-9a-f]+)", open(server_log).read())[1]}
    for i in range(a.workers):
        m = FINAL_RE.search(open(os.path.join(logdir, f"w{i}.log")).read())
        finals.add(m[1] if m else None)
    if len(finals) != 1:
        raise RuntimeError(f"{name}: the replicas' final checksums differ: {finals}; logs in {logdir}")
    text = open(os.path.join(logdir, "w0.log")).read()
    join = JOIN_RE.search(text)
    rounds = [(int(m[1]), float(m[2]), int(m[3]), int(m[4])) for m in ROUND_RE.finditer(text)]
    evals = [(int(m[1]), float(m[2])) for m in EVAL_RE.finditer(text)]
    params = int(PARAMS_RE.search(text)[1])
    expected = a.rounds * a.inner_steps if steps else a.rounds
    if [r[0] for r in rounds] != list(range(expected)):
        raise RuntimeError(f"{name}: worker 0 logged rounds {[r[0] for r in rounds]}, expected 0..{expected - 1}")
    return dict(config=join[1] if join else "", rounds=rounds, evals=evals, params=params, wall=wall,
                h=1 if steps else a.inner_steps)


def run_cached(a, name, flags, logdir):
    """run_method, or with --resume the outcome a finished run of the same flags left in logdir."""
    cache = os.path.join(logdir, "outcome.json")
    key = dict(flags=flags, extra=a.extra, worker_flags=a.worker_flags, workers=a.workers, rounds=a.rounds,
               inner_steps=a.inner_steps, warmup_steps=a.warmup_steps, eval_batches=a.eval_batches,
               eval_every=a.eval_every)
    if a.resume and os.path.exists(cache):
        with open(cache) as f:
            saved = json.load(f)
        if saved["key"] == key:
            print(f"  {name}: reusing the finished run in {logdir}", flush=True)
            return saved["outcome"]
    r = run_method(a, name, flags, logdir)
    with open(cache + ".tmp", "w") as f:
        json.dump(dict(key=key, outcome=r), f)
    os.replace(cache + ".tmp", cache)
    return r


def seed_flags(seed):
    """Seed 0 is the presets' own (init_seed 1234, data_seed 1); seed s > 0 draws another
    initial model and other data orders (each worker adds its join index to data_seed)."""
    return [f"--init_seed={1234 + seed}", f"--data_seed={1 + 1000 * seed}"] if seed else []


def sd_text(sd):
    return f"{sd:6.4f}" if math.isfinite(sd) else f"{'-':>6s}"


def config_value(config, key):
    m = re.search(rf"\b{key}=(\S+)", config)
    return m[1] if m else None


def model_shapes(config):
    """The tensor shapes of the model a worker's join line describes (GPT or LLaMA)."""
    m = re.search(r"GPT\(vocab (\d+), layers (\d+), heads \d+, d (\d+), ctx (\d+)\)", config)
    if m:
        return tensor_shapes(*(int(g) for g in m.groups()))
    m = re.search(r"LLaMA\(vocab (\d+), layers (\d+), heads (\d+), kv heads (\d+), ffn (\d+)(, tied)?, d (\d+),", config)
    if m:
        v, layers, heads, kv, ffn, tied, d = m.groups()
        return llama_shapes(int(v), int(layers), int(d), int(heads), int(kv), int(ffn), tied is not None)
    return []


def prepare_setting(a):
    """Server and worker flags of --setting (tokenizing --text first when it runs on tokens)."""
    _, server_flags, pieces = SETTINGS[a.setting]
    text = [f"--data={a.text}"] if a.text else []
    if pieces is None:
        return list(server_flags), text
    shards = os.path.join(a.out, "shards")
    r = subprocess.run([os.path.join(a.build, "muloco-prepare"), f"--out={shards}", f"--pieces={pieces}",
                        *([f"--text={a.text}"] if a.text else [])], capture_output=True, text=True, check=True)
    flags = re.search(r"(--vocab_size=\d+) (--tokenizer_checksum=\d+)", r.stdout).groups()
    print(f"frontier: {r.stdout.splitlines()[0]}", flush=True)
    return [*server_flags, *flags], [f"--data={shards}"]


def check_bytes(name, r, shapes):
    """Every logged payload has the size the wire format gives; returns (up, down) per payload."""
    up_spec, down_spec = config_value(r["config"], "up"), config_value(r["config"], "down")
    up, down = payload_bytes(up_spec, shapes), payload_bytes(down_spec, shapes)
    params = sum(n for _, n, _ in shapes)
    if params != r["params"]:
        raise RuntimeError(f"{name}: the worker has {r['params']} parameters, the layout here {params}")
    for rnd, _loss, u, d in r["rounds"]:
        if (u, d) != (up, down):
            raise RuntimeError(f"{name}: round {rnd} logged up {u} / down {d} bytes; the wire format gives {up} / {down}")
    return up, down, up_spec, down_spec


# ---------------------------------------------------------------- report

def write_plots(out, curves, names):
    """Validation loss against cumulative bytes (log x) and against inner steps, one line per
    method, from a gnuplot data file with one block per method (names may hold commas)."""
    gp = shutil.which("gnuplot")
    if not gp:
        print("frontier: gnuplot not found (apt-get install gnuplot-nox): no plots", file=sys.stderr)
        return []
    data = os.path.join(out, "frontier_curves.dat")
    with open(data, "w") as f:
        for n in names:
            f.write(f"# {n}: steps bytes val_loss\n")
            f.writelines(f"{c['steps']} {c['bytes']} {c['val_loss']}\n" for c in curves if c["method"] == n)
            f.write("\n\n")
    # The y axis stops a little above the start: a first-round spike would squash the rest.
    ymax = 1.05 * max(c["val_loss"] for c in curves if c["round"] == 0)
    pngs = []
    for kind, xcol, xlabel, logx in (("bytes", 2, "bytes sent + received per worker (cumulative)", True),
                                     ("rounds", 1, "inner steps per worker", False)):
        png = os.path.join(out, f"frontier_{kind}.png")
        plots = ", ".join(f"'{data}' index {i} using {xcol}:3 with linespoints title '{n}'" for i, n in enumerate(names))
        script = (f"set terminal png size 1000,650; set output '{png}'; set key outside right; set grid; "
                  f"set xlabel '{xlabel}'; set ylabel 'validation loss'; "
                  f"{'set logscale x; ' if logx else ''}set yrange [*:{ymax}]; plot {plots}")
        subprocess.run([gp, "-e", script], check=True, capture_output=True)
        pngs.append(png)
    return pngs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--build", default=os.path.join(here, "..", "build"))
    p.add_argument("--out", default=os.path.join(here, "results"))
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--inner_steps", type=int, default=20)
    p.add_argument("--warmup_steps", type=int, default=0, help="override every preset's warmup (0: keep)")
    p.add_argument("--eval_batches", type=int, default=8)
    p.add_argument("--eval_every", type=int, default=1, help="evaluate every N rounds of H steps (and at the end)")
    p.add_argument("--methods", default=",".join(m[0] for m in METHODS))
    p.add_argument("--timeout", type=float, default=1200, help="seconds per process")
    p.add_argument("--seeds", type=int, default=1,
                   help="runs per method, each with its own initial model and data order; the table gives their mean")
    p.add_argument("--smoke", action="store_true", help="every method, 2 workers, 2 rounds of 2 steps")
    p.add_argument("--logs", default=None,
                   help="keep the processes' logs here (default: a temporary folder; OUT/logs with --resume)")
    p.add_argument("--resume", action="store_true",
                   help="keep each finished run's outcome in its log folder and reuse it when the same run "
                        "(method, seed, flags) is asked again: a long sweep can be stopped and started again")
    p.add_argument("--vary", action="append", default=[], metavar="FLAG=V1,V2",
                   help="a sweep: every method once per value of this server flag, values split on ',' "
                        "(on ';' for the *_codec flags); repeatable: every combination")
    p.add_argument("--setting", default="gpt-bytes", choices=sorted(SETTINGS),
                   help="the model and data: " + "; ".join(f"{k}: {v[0]}" for k, v in SETTINGS.items()))
    p.add_argument("--text", default="", help="the corpus (a text file or directory; default: Debian's fortunes)")
    p.add_argument("extra", nargs="*", help="server flags added to every method (after --)")
    a = p.parse_args()
    if a.out == p.get_default("out") and a.setting != "gpt-bytes":
        a.out = os.path.join(a.out, a.setting)
    if a.seeds < 1:
        p.error("--seeds must be at least 1")
    seeded = [f for f in a.extra + [v.partition("=")[0] for v in a.vary] if re.match(r"-*(init_seed|data_seed)\b", f)]
    if a.seeds > 1 and seeded:
        p.error(f"--seeds sets init_seed and data_seed itself; drop {seeded}")
    if a.smoke:
        a.workers, a.rounds, a.inner_steps, a.warmup_steps, a.eval_batches = 2, 2, 2, 1, 1
    known = {m[0]: m for m in METHODS}
    chosen = [known[n] for n in a.methods.split(",") if n in known]
    unknown = [n for n in a.methods.split(",") if n not in known]
    if unknown:
        p.error(f"unknown methods {unknown} (known: {', '.join(known)})")
    for vary in a.vary:
        flag, _, values = vary.partition("=")
        chosen = [(f"{name}[{flag}={v}]", label, flags + [f"--{flag}={v}"])
                  for name, label, flags in chosen for v in values.split(";" if flag.endswith("codec") else ",")]
    os.makedirs(a.out, exist_ok=True)
    setting_flags, a.worker_flags = prepare_setting(a)
    a.extra = setting_flags + a.extra
    logs = a.logs or (os.path.join(a.out, "logs") if a.resume else tempfile.mkdtemp(prefix="muloco_frontier_"))
    print(f"frontier: {a.setting} ({SETTINGS[a.setting][0]}{', ' + a.text if a.text else ''})", flush=True)
    print(f"frontier: K={a.workers} workers, {a.rounds} rounds x H={a.inner_steps} inner steps per worker; logs in {logs}",
          flush=True)
    rows, curves = [], []
    for name, label, flags in chosen:
        runs = []
        for seed in range(a.seeds):
            r = run_cached(a, name, flags + seed_flags(seed), os.path.join(logs, name + (f"@seed{seed}" if seed else "")))
            shapes = model_shapes(r["config"])
            r["up"], r["down"], r["up_spec"], r["down_spec"] = check_bytes(name, r, shapes)
            losses = [v for _, v in r["evals"]]
            if not losses or not all(math.isfinite(v) for v in losses):
                raise RuntimeError(f"{name}: validation losses {losses}")
            runs.append(r)
        r, up, down = runs[0], runs[0]["up"], runs[0]["down"]
        if any([e[0] for e in run["evals"]] != [e[0] for e in r["evals"]] for run in runs):
            raise RuntimeError(f"{name}: the seeds evaluated at different rounds")
        # The seeds' mean at every evaluation (every run evaluates at the same rounds).
        evals = [(rnd, statistics.fmean(run["evals"][i][1] for run in runs)) for i, (rnd, _) in enumerate(r["evals"])]
        finals = [run["evals"][-1][1] for run in runs]
        n_payloads = len(r["rounds"])
        for rnd, val in evals:  # every round's payloads are (up, down) bytes: checked above
            curves.append(dict(method=name, round=rnd, steps=rnd * r["h"], payloads=rnd, bytes=rnd * (up + down),
                               val_loss=val))
        rows.append(dict(method=name, label=label, final_val_loss=evals[-1][1], start_val_loss=evals[0][1],
                         sd=statistics.stdev(finals) if len(finals) > 1 else float("nan"),
                         seeds="/".join(f"{v:.4f}" for v in finals), finals=finals,
                         bits_up=8 * up / r["params"], bits_down=8 * down / r["params"], payloads=n_payloads,
                         bytes_up=up * n_payloads, bytes_down=down * n_payloads,
                         wall_s=statistics.fmean(run["wall"] for run in runs), up_codec=r["up_spec"],
                         down_codec=r["down_spec"], params=r["params"]))
        print(f"  {name:13s} val {evals[-1][1]:.4f} ({rows[-1]['seeds']})  up {8 * up / r['params']:.3f} / "
              f"down {8 * down / r['params']:.3f} bits/param  {rows[-1]['wall_s']:.0f} s", flush=True)
    ref = next((r for r in rows if r["method"] == "diloco"), None)
    dense = next((m for m in rows if m["method"] == "muloco"), None)
    for r in rows:
        total = r["bytes_up"] + r["bytes_down"]
        r["x_smaller_than_diloco"] = (ref["bytes_up"] + ref["bytes_down"]) / total if ref else float("nan")
        r["vs_muloco_dense"] = r["final_val_loss"] / dense["final_val_loss"] - 1 if dense else float("nan")
        # Each seed against dense MuLoCo's run of the same seed (same initial model and data).
        r["vs_muloco_per_seed"] = "/".join(f"{100 * (v / d - 1):+.2f}%" for v, d in zip(r["finals"], dense["finals"])) \
            if dense else ""
    fields = ["method", "label", "final_val_loss", "sd", "seeds", "vs_muloco_dense", "vs_muloco_per_seed", "bits_up", "bits_down", "payloads", "bytes_up",
              "bytes_down", "x_smaller_than_diloco", "wall_s", "up_codec", "down_codec", "params", "start_val_loss"]
    with open(os.path.join(a.out, "frontier.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    curves_csv = os.path.join(a.out, "frontier_curves.csv")
    with open(curves_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["method", "round", "steps", "payloads", "bytes", "val_loss"])
        w.writeheader()
        w.writerows(curves)
    head = (f"K={a.workers} workers, {a.rounds} rounds x H={a.inner_steps} steps per worker "
            f"({rows[0]['params'] if rows else 0} parameters); bits per parameter per payload, headers and tables included")
    width = max([13] + [len(r["method"]) for r in rows])
    lines = [head, "",
             f"{'method':{width}s} {'final val':>9s} {'sd':>6s} {'vs MuLoCo':>9s} {'bits up':>8s} {'bits down':>9s} {'payloads':>8s} "
             f"{'MB/worker':>9s} {'x fewer':>8s} {'wall s':>7s}  label"]
    for r in rows:
        lines.append(f"{r['method']:{width}s} {r['final_val_loss']:9.4f} {sd_text(r['sd'])} {100 * r['vs_muloco_dense']:+8.1f}% {r['bits_up']:8.3f} "
                     f"{r['bits_down']:9.3f} {r['payloads']:8d} {(r['bytes_up'] + r['bytes_down']) / 1e6:9.2f} "
                     f"{r['x_smaller_than_diloco']:8.1f} {r['wall_s']:7.0f}  {r['label']}")
    if a.seeds > 1 and dense:
        lines += ["", "each seed against MuLoCo dense's run of the same seed:"]
        lines += [f"  {r['method']:{width}s} {r['vs_muloco_per_seed']}" for r in rows if r["vs_muloco_per_seed"]]
    lines += ["", "x fewer: total bytes up + down per worker, DiLoCo dense over this method's; "
              "vs MuLoCo: final validation loss against MuLoCo dense; "
              f"final val: the mean of {a.seeds} seed(s), sd their sample standard deviation"]
    table = "\n".join(lines)
    with open(os.path.join(a.out, "frontier.txt"), "w") as f:
        f.write(table + "\n")
    print("\n" + table)
    for png in write_plots(a.out, curves, [r["method"] for r in rows]):
        print(f"plot: {png}")


if __name__ == "__main__":
    main()
