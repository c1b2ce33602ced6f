#!/usr/bin/env python3
"""Attack benchmark: what hostile volunteers do to the honest workers' final validation loss.

For every attack, and once clean, runs a real muloco-server (TLS off, join tokens on) with K
honest C++ workers and the attacker(s) of tests/integration/attacks.py, for --seeds seeds,
and prints a markdown table: the honest workers' final validation loss (mean over seeds and
honest workers), its change against the clean run, rounds closed, wall time (rounds that wait
on a silent attacker show up here), sessions admitted, pushes accepted, and the server's
screening counters; then every run's /metrics lines matching screen|reject|clip.

  bench/attacks.py [--build build] [--attacks a,b,...] [--seeds N] [--rounds 10]
                   [--inner_steps 10] [--honest 2] [--server_flags "--robust=off ..."]
                   [--logs DIR] [--out FILE] [--checksum_seed0]

Attacks: scale-1000, scale+1000 (±1000 × the estimated honest mean update g), one_tensor
(1.4‖g‖ on ln_f's gain), stealthy (−1.4 g), zeros, negated_replay (−g at one worker's norm),
alternate (zeros in even rounds, silent in odd), late (scale-1000 joining at round 4), noise
(Gaussian at one worker's norm), collude2-* (two tokens), sybil3-* (three sessions of one
token; the table says how many the server admitted), silent3 (three tokens that join and never
push). "rounds waited" is the server's muloco_straggler_waits_total, the most over the seeds.
--checksum_seed0: push checksums with seed 0 (servers before the round-seeded payload checksum).
"""
import argparse
import collections
import os
import re
import shlex
import statistics
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from harness import TINY, Proc, health_check, wait_for_log  # noqa: E402

# name -> (strategy in attacks.STRATEGIES, sessions, distinct tokens, first round attacked)
ATTACKS = {
    "scale-1000": ("scale-1000", 1, 1, 0),
    "scale+1000": ("scale+1000", 1, 1, 0),
    "one_tensor": ("one_tensor", 1, 1, 0),
    "stealthy": ("stealthy", 1, 1, 0),
    "zeros": ("zeros", 1, 1, 0),
    "negated_replay": ("negated_replay", 1, 1, 0),
    "alternate": ("alternate", 1, 1, 0),
    "late": ("late", 1, 1, 4),
    "noise": ("noise", 1, 1, 0),
    "collude2-scale": ("scale-1000", 2, 2, 0),
    "collude2-stealthy": ("stealthy", 2, 2, 0),
    "sybil3-scale": ("scale-1000", 3, 1, 0),
    "sybil3-stealthy": ("stealthy", 3, 1, 0),
    "silent3": ("silent", 3, 3, 0),
}
METRIC_RE = re.compile(r"screen|reject|clip|straggler")
FINAL_RE = re.compile(r"final: val_loss ([\d.]+|nan|inf)")
CLOSED_RE = re.compile(r"round (\d+) closed")


def honest_token(i):
    return f"honest-token-{i:02d}-0123456789"


def attacker_token(i):
    return f"attacker-token-{i:02d}-0123456789"


def seed_flags(seed):
    """As bench/frontier.py: seed 0 is the preset's own, seed s > 0 another init and data order."""
    return [f"--init_seed={1234 + seed}", f"--data_seed={1 + 1000 * seed}"] if seed else []


def read(path):
    with open(path) as f:
        return f.read()


def open_round(server):
    """The server's open round, from its log (no session needed): last closed + 1."""
    closed = CLOSED_RE.findall(server.text())
    return int(closed[-1]) + 1 if closed else 0


def scrape(port):
    """The /metrics lines matching screen|reject|clip|straggler (comments left out)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError as e:
        return [f"(metrics unavailable: {e})"]
    return [l for l in text.splitlines() if not l.startswith("#") and METRIC_RE.search(l)]


def metric_total(lines, pattern):
    """Sum of the counters (names ending _total) matching `pattern` in scraped lines."""
    total = 0.0
    for l in lines:
        m = re.match(r"^(\w+)(\{.*?\})? (\S+)$", l)
        if m and re.search(pattern, m[1]) and m[1].endswith("_total"):
            total += float(m[3])
    return total


def start_server(a, d, seed, tokens):
    port_file = os.path.join(d, "server.port")
    flags = ["--insecure", f"--join_tokens={tokens}", f"--preset={a.preset}", *TINY, f"--rounds={a.rounds}",
             f"--inner_steps={a.inner_steps}", f"--min_quorum={a.honest}", f"--round_timeout_s={a.round_timeout_s}",
             "--eval_every=0", "--metrics_listen=127.0.0.1:0", "--linger_s=60", *seed_flags(seed),
             *shlex.split(a.server_flags)]
    server = Proc([os.path.join(a.build, "muloco-server"), "--listen=127.0.0.1:0", f"--port_file={port_file}", *flags],
                  os.path.join(d, "server.log"))
    deadline = time.time() + 30
    while time.time() < deadline:
        if server.p.poll() is not None:
            raise RuntimeError(f"server exited early:\n{server.text()[-3000:]}")
        if os.path.exists(port_file) and read(port_file).strip():
            addr = f"127.0.0.1:{read(port_file).strip()}"
            if health_check(addr):
                port = int(wait_for_log(server, r"metrics on port (\d+)", 30)[1])
                return server, addr, port
        time.sleep(0.05)
    raise RuntimeError("server never became healthy")


def start_honest(a, d, addr, server, procs):
    """K honest workers, one join token each (servers may admit one live worker per token),
    each joined before the next starts (their data seeds follow the join order). Every process
    goes into `procs` as it starts, so that a failure still kills it."""
    workers = []
    for i in range(a.honest):
        token_file = os.path.join(d, f"honest{i}.token")
        with open(token_file, "w") as f:
            f.write(honest_token(i) + "\n")
        w = Proc([os.path.join(a.build, "muloco-worker"), f"--server={addr}", "--insecure", f"--token_file={token_file}",
                  f"--name=honest{i}", "--threads=1", "--progress_s=0"], os.path.join(d, f"honest{i}.log"))
        procs.append(w)
        workers.append(w)
        wait_for_log(server, rf"\(honest{i}@site-{i}\) joined", 60)
    return workers


def start_attackers(A, attack, addr, server):
    strategy, sessions, tokens, start = ATTACKS[attack]
    out = []
    for j in range(sessions):
        att = A.Attacker(addr, attacker_token(j % tokens), A.STRATEGIES[strategy](), name=f"mallory{j}",
                         start_round=start, round_probe=lambda: open_round(server))
        out.append(att.start())
    return out


def run_one(a, A, attack, seed, d):
    """One run (attack None: clean). Returns the measurements."""
    os.makedirs(d, exist_ok=True)
    _, sessions, tokens, _ = ATTACKS.get(attack, (None, 0, 0, 0))
    token_path = os.path.join(d, "tokens")
    with open(token_path, "w") as f:
        f.write("".join(f"site-{i} {honest_token(i)}\n" for i in range(a.honest)) +
                "".join(f"mallory{j} {attacker_token(j)}\n" for j in range(tokens)))
    server, addr, port = start_server(a, d, seed, token_path)
    procs, attackers = [server], []
    try:
        t0 = time.time()
        workers = start_honest(a, d, addr, server, procs)
        attackers = start_attackers(A, attack, addr, server) if attack else []
        codes = [w.wait(timeout=a.timeout) for w in workers]
        wall = time.time() - t0
        lines = scrape(port)
        for att in attackers:
            att.stop()
        try:
            server.wait(timeout=90)
        except Exception:  # noqa: BLE001  (a server that does not exit is killed below)
            pass
        finals = []
        for w, code in zip(workers, codes):
            m = FINAL_RE.search(w.text())
            finals.append(float(m[1]) if m and code == 0 else float("nan"))
        return dict(finals=finals, wall=wall, rounds=len(CLOSED_RE.findall(server.text())), metrics=lines,
                    screened=metric_total(lines, "screen"), waits=metric_total(lines, "straggler_waits"),
                    asked=sessions,
                    admitted=sum(att.admitted() for att in attackers),
                    pushes_ok=sum(att.codes.get("OK", 0) for att in attackers),
                    pushes=sum(len(att.pushed_rounds) for att in attackers),
                    codes=sum((att.codes for att in attackers), collections.Counter()),
                    join_codes=[att.join_code.name if att.join_code else "-" for att in attackers],
                    errors=[e for att in attackers for e in att.errors],
                    g_norm=statistics.median([v for att in attackers for v in att.g_norms.values()] or [float("nan")]),
                    screening_log=len(re.findall(r"screening", server.text())))
    finally:
        for att in attackers:
            att.stop(leave=False, timeout=1)
        for p in procs:
            p.kill()


def mean(xs):
    xs = [x for x in xs if x == x]
    return statistics.fmean(xs) if xs else float("nan")


def row(name, runs, clean_loss):
    loss = mean([v for r in runs for v in r["finals"]])
    vs = f"{100 * (loss - clean_loss) / clean_loss:+.2f}%" if name != "clean" else "—"
    failed = sum(v != v for r in runs for v in r["finals"])
    sessions = "—" if name == "clean" else f"{min(r['admitted'] for r in runs)}/{runs[0]['asked']}"
    pushes = "—" if name == "clean" else f"{sum(r['pushes_ok'] for r in runs)}/{sum(r['pushes'] for r in runs)}"
    return (f"| {name} | {sessions} | {loss:.4f}{f' ({failed} failed)' if failed else ''} | {vs} | "
            f"{mean([r['rounds'] for r in runs]):.0f} | {mean([r['wall'] for r in runs]):.1f} | {pushes} | "
            f"{mean([r['screened'] for r in runs]):.0f} | {max(r['waits'] for r in runs):.0f} |")


def report(results, order):
    clean_loss = mean([v for r in results["clean"] for v in r["finals"]])
    lines = ["| attack | sessions admitted | honest final val loss | vs clean | rounds | wall s | pushes accepted |"
             " screened (metrics) | rounds waited (most) |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [row(name, results[name], clean_loss) for name in ["clean", *order]]
    lines.append("")
    for name in order:
        for s, r in enumerate(results[name]):
            extra = {k: v for k, v in (("push codes", dict(r["codes"])), ("joins", r["join_codes"]),
                                       ("errors", r["errors"][:3]), ("median |g| est", round(r["g_norm"], 5)),
                                       ("screening log lines", r["screening_log"])) if v}
            lines.append(f"{name} seed {s}: {extra}")
            lines += [f"    {m}" for m in r["metrics"] if not re.search(r" 0$", m)]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--attacks", default=",".join(ATTACKS))
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--inner_steps", type=int, default=10)
    p.add_argument("--honest", type=int, default=2)
    p.add_argument("--preset", default="muloco-2bit")
    p.add_argument("--round_timeout_s", type=float, default=5)
    p.add_argument("--server_flags", default="", help="extra server flags, one string (e.g. '--robust=off')")
    p.add_argument("--timeout", type=float, default=900, help="seconds an honest worker may take")
    p.add_argument("--logs", default=None, help="keep the runs' logs here (default: a temporary folder)")
    p.add_argument("--out", default=None, help="also write the report here")
    p.add_argument("--checksum_seed0", action="store_true",
                   help="payload checksums with seed 0 (servers before the round-seeded checksum)")
    a = p.parse_args()
    order = [n for n in a.attacks.split(",") if n]
    unknown = [n for n in order if n not in ATTACKS]
    if unknown:
        p.error(f"unknown attacks {unknown} (known: {', '.join(ATTACKS)})")
    if a.honest < 2:
        p.error("--honest must be at least 2 (--min_quorum=2)")
    a.build = os.path.abspath(a.build)
    missing = [b for b in ("muloco-server", "muloco-worker") if not os.access(os.path.join(a.build, b), os.X_OK)]
    if missing:
        p.error(f"{', '.join(missing)} not built in {a.build}")
    sys.path.insert(0, os.path.join(a.build, "python"))
    import attacks as A  # noqa: E402  (needs the generated protos on the path)
    A.ROUND_SEEDED = not a.checksum_seed0
    logs = a.logs or tempfile.mkdtemp(prefix="muloco_attacks_")
    print(f"attacks: {a.honest} honest workers, {a.rounds} rounds x {a.inner_steps} inner steps, preset {a.preset}, "
          f"{a.seeds} seed(s); logs in {logs}", flush=True)
    results = {}
    for name in ["clean", *order]:
        results[name] = []
        for seed in range(a.seeds):
            r = run_one(a, A, None if name == "clean" else name, seed, os.path.join(logs, f"{name}@seed{seed}"))
            results[name].append(r)
            print(f"  {name:18s} seed {seed}: honest {['%.4f' % v for v in r['finals']]}, {r['rounds']} rounds, "
                  f"{r['wall']:.1f} s" + (f", sessions {r['admitted']}/{r['asked']}, pushes ok {r['pushes_ok']}/"
                                          f"{r['pushes']}" if name != "clean" else ""), flush=True)
    text = report(results, order)
    print("\n" + text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
