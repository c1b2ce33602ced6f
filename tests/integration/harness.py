"""Process harness for integration tests: starts muloco-server / muloco-worker on loopback
(port 0, read back from --port_file), waits on the gRPC health service (never on fixed
sleeps), and kills every child when the test ends.

Environment (set by ctest): MULOCO_BUILD (build dir), PYTHONPATH (generated muloco_pb2).
"""
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

BUILD = os.environ.get("MULOCO_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
SERVER_BIN = os.path.join(BUILD, "muloco-server")
WORKER_BIN = os.path.join(BUILD, "muloco-worker")

# Plaintext and open joins, as every test but the security tests runs (those pass their own).
PLAIN_SERVER = ("--insecure", "--open_join")
PLAIN_WORKER = ("--insecure",)

# A tiny model: fast on one core, still learns the byte statistics of the corpus.
TINY = ["--n_layer=1", "--n_head=2", "--d_model=32", "--context=32", "--batch_size=8",
        "--inner_lr=1e-2", "--warmup_steps=5", "--eval_batches=4"]


def health_check(address, timeout=0.5, credentials=None, options=()):
    """grpc.health.v1 Check with an empty service name; True when SERVING. `credentials`:
    grpc.ssl_channel_credentials(...) for a TLS server (None: plaintext)."""
    channel = (grpc.secure_channel(address, credentials, options=options) if credentials
               else grpc.insecure_channel(address))
    with channel as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b, response_deserializer=lambda b: b)
        try:
            return check(b"", timeout=timeout) == b"\x08\x01"  # HealthCheckResponse{status: SERVING}
        except grpc.RpcError:
            return False


class LogWaitError(Exception):
    pass


def wait_for_log(proc, pattern, timeout):
    """Polls proc's log until `pattern` matches; returns the match. LogWaitError when proc
    exits without it or `timeout` seconds pass."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, proc.text())
        if m:
            return m
        if proc.p.poll() is not None:
            m = re.search(pattern, proc.text())
            if m:
                return m
            raise LogWaitError(f"{proc.log_path} exited before /{pattern}/:\n{proc.text()[-4000:]}")
        time.sleep(0.1)
    raise LogWaitError(f"timed out waiting for /{pattern}/ in {proc.log_path}:\n{proc.text()[-4000:]}")


class Proc:
    def __init__(self, args, log_path, env=None):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env)

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def wait(self, timeout):
        return self.p.wait(timeout=timeout)

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
            self.p.wait()
        self.log.close()


class Proxy:
    """TCP forwarder on loopback standing in for a network link: cut() closes every
    connection and refuses new ones until restore(); `rate` (bytes/s per direction, None:
    unlimited) makes it a slow link; freeze() stops all forwarding, connections kept open,
    until thaw(). `upstream_bytes` counts what it forwarded towards the target."""

    def __init__(self, target_port, rate=None):
        self.target, self.rate = ("127.0.0.1", target_port), rate
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.up = True
        self.moving = threading.Event()
        self.moving.set()
        self.conns = []
        self.upstream_bytes = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b, up in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, up), daemon=True).start()

    def _pipe(self, a, b, up):
        step = 1024 if self.rate else 65536  # small slices keep a slow link's pace even
        try:
            while True:
                data = a.recv(step)
                if not data:
                    break
                self.moving.wait()
                b.sendall(data)
                if up:
                    with self.lock:
                        self.upstream_bytes += len(data)
                if self.rate:
                    time.sleep(len(data) / self.rate)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.up = False
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.conns = []

    def restore(self):
        self.up = True

    def freeze(self):
        self.moving.clear()

    def thaw(self):
        self.moving.set()


class ClusterTest(unittest.TestCase):
    """Base class: self.start_server(...), self.start_worker(...); children die in tearDown."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="muloco_it_")
        self.procs = []
        self._problems_before = self._problems()

    def tearDown(self):
        for p in self.procs:
            p.kill()
        if self._problems() > self._problems_before:  # this test failed: show its processes' logs
            for p in self.procs:
                print(f"---- {p.log_path}\n{p.text()[-6000:]}")

    def _problems(self):
        result = getattr(getattr(self, "_outcome", None), "result", None)
        return len(result.failures) + len(result.errors) if result else 0

    def path(self, name):
        return os.path.join(self.tmp, name)

    def start_server(self, *flags, name="server", transport=PLAIN_SERVER, credentials=None, options=()):
        """Starts a server and waits until it is healthy; `credentials`/`options` reach the
        health check of a TLS server. Returns (proc, "127.0.0.1:PORT")."""
        port_file = self.path(f"{name}.port")
        proc = Proc([SERVER_BIN, "--listen=127.0.0.1:0", f"--port_file={port_file}", *transport, *flags],
                    self.path(f"{name}.log"))
        self.procs.append(proc)
        deadline = time.time() + 30
        while time.time() < deadline:
            if proc.p.poll() is not None:
                self.fail(f"server exited early:\n{proc.text()}")
            if os.path.exists(port_file):
                with open(port_file) as f:
                    address = f"127.0.0.1:{f.read().strip()}"
                if health_check(address, credentials=credentials, options=options):
                    return proc, address
            time.sleep(0.05)
        self.fail("server never became healthy")

    def start_worker(self, address, *flags, name="worker", transport=PLAIN_WORKER):
        proc = Proc([WORKER_BIN, f"--server={address}", *transport, *flags], self.path(f"{name}.log"))
        self.procs.append(proc)
        return proc

    def run_cluster(self, workers, *server_flags, tag="", timeout=400):
        """Runs a server (--min_quorum=workers unless server_flags say otherwise) and `workers`
        workers to the end of the run: every process exits 0 and every worker's final
        parameters are bit-identical to the server's. Returns (server, workers)."""
        # Every worker is in from round 0 (a fast first worker cannot close rounds alone).
        server, addr = self.start_server(f"--min_quorum={workers}", *server_flags,
                                         f"--save_final={self.path(tag + 'server.bin')}", name=tag + "server")
        procs = [self.start_worker(addr, f"--save_final={self.path(f'{tag}w{i}.bin')}", f"--name={tag}w{i}",
                                   name=f"{tag}w{i}") for i in range(workers)]
        for w in procs:
            self.assertEqual(w.wait(timeout=timeout), 0, w.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        server_params = self.read_bytes(tag + "server.bin")
        self.assertGreater(len(server_params), 0)
        for i in range(workers):
            self.assertEqual(self.read_bytes(f"{tag}w{i}.bin"), server_params, f"worker {i} differs from the server")
        return server, procs

    def wait_for(self, proc, pattern, timeout):
        """Polls proc's log until `pattern` matches; returns the match."""
        try:
            return wait_for_log(proc, pattern, timeout)
        except LogWaitError as e:
            self.fail(str(e))

    def kill_with_saved_state(self, proc, state, timeout=60):
        """SIGKILLs a worker run with --state_file=state once the file exists: stopped
        (SIGSTOP) first, so that no push drops the file between the look and the kill."""
        deadline = time.time() + timeout
        while True:
            self.assertLess(time.time(), deadline, f"no {state} saved")
            if os.path.exists(state):
                proc.p.send_signal(signal.SIGSTOP)
                if os.path.exists(state):
                    break
                proc.p.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        proc.kill()

    def val_losses(self, proc):
        """{round: val_loss} from a worker log."""
        return {int(r): float(v) for r, v in re.findall(r"eval: round (\d+) val_loss ([\d.]+)", proc.text())}

    def read_bytes(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()
