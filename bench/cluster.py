"""A real muloco-server and muloco-workers on loopback, for the benchmarks that compare run
modes (bench/async_speed.py, bench/chaos.py): the server picks a free port and writes it to a
port file; each process logs to LOGDIR/NAME.log (a restarted worker appends to its log)."""
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from harness import TINY  # noqa: E402,F401  (the benchmarks' model: fast on one core)


def stamp(text):
    """Seconds since the epoch of a log line's timestamp (UTC, "2026-12-07T13:14:36.079Z")."""
    return datetime.strptime(text.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


class Cluster:
    def __init__(self, build, logdir):
        self.build, self.logdir = build, logdir
        os.makedirs(logdir, exist_ok=True)
        self.server = None
        self.workers = {}  # name -> Popen (the latest process of that name)
        self.procs = []    # every process started, for kill()

    def log(self, name):
        return os.path.join(self.logdir, f"{name}.log")

    def start_server(self, flags, timeout=60):
        """Starts muloco-server with `flags` (plaintext, open joins); returns its port."""
        port_file = os.path.join(self.logdir, "port")
        if os.path.exists(port_file):
            os.remove(port_file)  # a killed run's port must not be read as this one's
        self.server = subprocess.Popen([os.path.join(self.build, "muloco-server"), "--listen=127.0.0.1:0", "--insecure",
                                        "--open_join", f"--port_file={port_file}", *flags],
                                       stdout=open(self.log("server"), "w"), stderr=subprocess.STDOUT)
        self.procs.append(self.server)
        deadline = time.time() + timeout
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if self.server.poll() is not None or time.time() > deadline:
                raise RuntimeError("the server did not start:\n" + open(self.log("server")).read()[-3000:])
            time.sleep(0.05)
        return int(open(port_file).read().strip())

    def start_worker(self, name, port, flags=()):
        """Starts (or restarts: the previous process of that name is killed) worker `name` against
        127.0.0.1:port."""
        old = self.workers.get(name)
        if old is not None and old.poll() is None:
            old.kill()
            old.wait()
        self.workers[name] = subprocess.Popen(
            [os.path.join(self.build, "muloco-worker"), f"--server=127.0.0.1:{port}", "--insecure", f"--name={name}",
             "--threads=1", "--progress_s=0", *flags],
            stdout=open(self.log(name), "a"), stderr=subprocess.STDOUT)
        self.procs.append(self.workers[name])
        return self.workers[name]

    def wait(self, timeout):
        """Waits for every process to exit; RuntimeError when one fails."""
        for name, p in [*self.workers.items(), ("server", self.server)]:
            if p.wait(timeout=timeout) != 0:
                raise RuntimeError(f"{name} failed; logs in {self.logdir}")

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
