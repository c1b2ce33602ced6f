"""Transport security and admission against the real binaries, probed by an independent
Python client (peer.py):
- TLS: a run over mutual TLS with join tokens ends with two real workers bit-identical to
  the server; clients that lack the CA, a client certificate (or carry one from another
  CA), or speak plaintext are refused at the handshake, and so are workers without
  --tls_cert or with the wrong CA. With server-only TLS a client without a certificate joins.
- Startup: a server without TLS (and no --insecure), without join tokens (and no
  --open_join) or with a missing PEM/token file exits 2 naming the flag or file.
- Tokens: no token -> UNAUTHENTICATED, a wrong one -> PERMISSION_DENIED, a valid one -> a
  32-hex-digit session key; a token removed from the file is revoked within seconds (its
  Python peer and its real worker are refused and evicted, other tokens unaffected); SIGHUP
  reloads a file whose change stat() cannot see.
- Sessions: a peer that knows another's id cannot speak for it (every call refused, nothing
  counted), calls without session metadata are UNAUTHENTICATED.
- Names are data: a worker name cannot forge log lines, nor cut off or fake the label of
  the token that admitted it.
"""
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import unittest

import grpc
import xxhash
import yaml

import muloco.v1.muloco_pb2 as pb
from harness import SERVER_BIN, TINY, WORKER_BIN, ClusterTest
from peer import Peer, code_of, dense_payload, gpt_shapes

OK = grpc.StatusCode.OK
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
NOT_FOUND = grpc.StatusCode.NOT_FOUND


# ---------------------------------------------------------------------------------------
# Helpers


def make_pki(directory):
    """A test CA and, signed by it, a server certificate for localhost (SAN DNS:localhost,
    IP:127.0.0.1) and a client certificate; plus a rogue CA and a client certificate it
    signed. EC P-256, made with the openssl CLI. Returns {name: path} for ca.pem, server.pem,
    server.key, client.pem, client.key, rogue.pem, rogue_client.pem, rogue_client.key."""
    def openssl(*args):
        r = subprocess.run(["openssl", *args], cwd=directory, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)}:\n{r.stderr}")

    def key(name):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")

    def ca(name, cn):
        key(name)
        openssl("req", "-x509", "-new", "-key", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={cn}",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def leaf(name, cn, issuer, extensions, serial):
        key(name)
        openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        with open(os.path.join(directory, f"{name}.ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\n" + extensions)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem", "-CAkey", f"{issuer}.key",
                "-set_serial", str(serial), "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext")

    ca("ca", "muloco test CA")
    ca("rogue", "rogue CA")
    leaf("server", "localhost", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n", 2)
    leaf("client", "worker", "ca", "extendedKeyUsage=clientAuth\n", 3)
    leaf("rogue_client", "worker", "rogue", "extendedKeyUsage=clientAuth\n", 4)
    return {f"{n}.{ext}": os.path.join(directory, f"{n}.{ext}")
            for n in ("ca", "server", "client", "rogue", "rogue_client") for ext in ("pem", "key")}


def read(path):
    with open(path, "rb") as f:
        return f.read()


def new_token():
    return secrets.token_hex(16)  # 32 characters


def write_tokens(path, tokens, mtime_ns=None):
    """Replaces the token file atomically (the server never reads half of it); `mtime_ns`
    sets its modification time before it appears."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("# muloco join tokens: LABEL TOKEN\n")
        f.writelines(f"{label} {token}\n" for label, token in tokens.items())
    if mtime_ns is not None:
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.replace(tmp, path)


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def poll(fn, want, timeout):
    """Calls fn() until it returns `want` or `timeout` passes; returns the last result."""
    deadline = time.time() + timeout
    while True:
        got = fn()
        if got == want or time.time() > deadline:
            return got
        time.sleep(0.1)


def session_calls(peer, payload):
    """Every session-checked RPC as f(message_worker_id, metadata): the id in the message and
    the call metadata chosen separately (round 0, 5 s deadline)."""
    def fetch(wid, md):
        return b"".join(c.data for c in peer._fetch(pb.FetchModelRequest(worker_id=wid), metadata=md, timeout=5))

    def push(wid, md):
        chunk = pb.UpdateChunk(worker_id=wid, round=0, total_bytes=len(payload), data=payload,
                               payload_checksum=xxhash.xxh64_intdigest(payload, seed=0))
        return peer._push(iter([chunk]), metadata=md, timeout=5)

    def await_round(wid, md):
        return list(peer._await(pb.AwaitRoundRequest(worker_id=wid, round=0), metadata=md, timeout=5))

    return {
        "FetchModel": fetch,
        "PushUpdate": push,
        "AwaitRound": await_round,
        "Heartbeat": lambda wid, md: peer._heartbeat(pb.HeartbeatRequest(worker_id=wid), metadata=md, timeout=5),
        "Leave": lambda wid, md: peer._leave(pb.LeaveRequest(worker_id=wid), metadata=md, timeout=5),
    }


def session_md(worker_id, key):
    return (("muloco-worker", str(worker_id)), ("muloco-session", key))


# ---------------------------------------------------------------------------------------
# TLS


class Tls(ClusterTest):
    def setUp(self):
        super().setUp()
        self.pki = make_pki(self.tmp)
        self.token = new_token()
        self.tokens = self.path("tokens")
        write_tokens(self.tokens, {"alice": self.token})
        self.token_file = write_file(self.path("alice.token"), self.token + "\n")

    def creds(self, ca=True, client="client"):
        """Python channel credentials: our CA (or the system roots) and a client certificate."""
        return grpc.ssl_channel_credentials(
            root_certificates=read(self.pki["ca.pem"]) if ca else None,
            private_key=read(self.pki[f"{client}.key"]) if client else None,
            certificate_chain=read(self.pki[f"{client}.pem"]) if client else None)

    def join_code(self, address, credentials):
        peer = Peer(address, credentials)
        try:
            return code_of(peer.join, name="probe", token=self.token, timeout=5)
        finally:
            peer.close()

    def test_mutual_tls_run_and_refused_handshakes(self):
        server, addr = self.start_server(
            *TINY, "--rounds=2", "--inner_steps=4", "--min_quorum=2", f"--save_final={self.path('server.bin')}",
            transport=(f"--tls_cert={self.pki['server.pem']}", f"--tls_key={self.pki['server.key']}",
                       f"--tls_client_ca={self.pki['ca.pem']}", f"--join_tokens={self.tokens}", "--max_workers_per_token=8"),
            credentials=self.creds())

        # Refused at the handshake: no CA (system roots), no client certificate, a client
        # certificate from another CA, plaintext, a name the server certificate lacks.
        self.assertEqual(self.join_code(addr, self.creds(ca=False)), UNAVAILABLE, "client without the CA")
        self.assertEqual(self.join_code(addr, self.creds(client=None)), UNAVAILABLE, "client without a certificate")
        self.assertEqual(self.join_code(addr, self.creds(client="rogue_client")), UNAVAILABLE, "client cert of a rogue CA")
        self.assertEqual(self.join_code(addr, None), UNAVAILABLE, "plaintext client")
        wrong_name = Peer(addr, self.creds(), options=(("grpc.ssl_target_name_override", "evil.example"),))
        self.assertEqual(code_of(wrong_name.join, token=self.token, timeout=5), UNAVAILABLE, "wrong server name")
        wrong_name.close()

        # A complete client (CA + client certificate + token) joins, fetches, leaves
        # (before any push, so that the run does not expect it).
        probe = Peer(addr, self.creds())
        joined = probe.join(name="probe", token=self.token)
        self.assertRegex(joined.session_key, r"^[0-9a-f]{32}$")
        self.assertEqual(len(probe.fetch()), 4 * joined.num_params)
        probe.leave()
        probe.close()

        # Workers that cannot complete the handshake give up (UNAVAILABLE until
        # --connect_timeout_s); two honest workers (one checking the IP SAN 127.0.0.1, one
        # the DNS name via --tls_server_name) run the whole run over mutual TLS.
        ca, cert, key = (f"--tls_ca={self.pki['ca.pem']}", f"--tls_cert={self.pki['client.pem']}",
                         f"--tls_key={self.pki['client.key']}")
        token = f"--token_file={self.token_file}"
        refused = {
            "no_cert": self.start_worker(addr, "--connect_timeout_s=1", name="no_cert", transport=(ca, token)),
            "rogue_ca": self.start_worker(addr, "--connect_timeout_s=1", name="rogue_ca",
                                          transport=(f"--tls_ca={self.pki['rogue.pem']}", cert, key, token)),
        }
        honest = [self.start_worker(addr, f"--save_final={self.path(f'w{i}.bin')}", f"--name=w{i}", name=f"w{i}",
                                    transport=(ca, cert, key, token, *extra))
                  for i, extra in enumerate([(), ("--tls_server_name=localhost",)])]
        for what, w in refused.items():
            self.assertEqual(w.wait(timeout=60), 1, f"{what}:\n{w.text()}")
            self.assertIn("cannot join", w.text(), what)
        for w in honest:
            self.assertEqual(w.wait(timeout=300), 0, w.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())

        text = server.text()
        self.assertEqual(len(re.findall(r"\(w[01]@alice\) joined", text)), 2, text)
        closed = re.findall(r"round (\d+) closed: (\d+) contributors", text)
        self.assertEqual(closed, [("0", "1"), ("1", "1")], text)  # one token's two sessions: one vote
        params = self.read_bytes("server.bin")
        self.assertEqual(len(params), 4 * joined.num_params)
        for i in range(2):
            self.assertEqual(self.read_bytes(f"w{i}.bin"), params, f"worker {i} differs from the server")

    def test_server_only_tls(self):
        _, addr = self.start_server(
            *TINY, transport=(f"--tls_cert={self.pki['server.pem']}", f"--tls_key={self.pki['server.key']}",
                              f"--join_tokens={self.tokens}", "--max_workers_per_token=8"),
            credentials=self.creds(client=None))
        self.assertEqual(self.join_code(addr, self.creds(client=None)), OK, "CA, no client certificate")
        self.assertEqual(self.join_code(addr, self.creds(ca=False, client=None)), UNAVAILABLE, "system roots")
        self.assertEqual(self.join_code(addr, None), UNAVAILABLE, "plaintext")


# ---------------------------------------------------------------------------------------
# Startup refusals


class StartupRefusals(ClusterTest):
    def refuse(self, binary, *flags, want_rc=2):
        """Runs binary with flags; asserts exit status want_rc and returns its stderr."""
        r = subprocess.run([binary, *flags], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, want_rc, f"{flags}:\n{r.stdout}{r.stderr}")
        return r.stderr

    def test_refusals_name_the_flag(self):
        pki = make_pki(self.tmp)
        tokens = self.path("tokens")
        write_tokens(tokens, {"alice": new_token()})
        missing = self.path("missing.pem")
        server = lambda *f: self.refuse(SERVER_BIN, "--listen=127.0.0.1:0", *TINY, *f)

        self.assertIn("--tls_cert", server(f"--join_tokens={tokens}"))  # neither TLS nor --insecure
        err = server("--open_join")
        self.assertIn("--tls_cert", err)
        self.assertIn("--insecure", err)
        err = server("--insecure")  # neither tokens nor --open_join
        self.assertIn("--join_tokens", err)
        self.assertIn("--open_join", err)
        self.assertIn("--join_tokens", server(f"--tls_cert={pki['server.pem']}", f"--tls_key={pki['server.key']}"))
        self.assertIn("--tls_key", server(f"--tls_cert={pki['server.pem']}", "--open_join"))
        for flag, files in (("tls_cert", (missing, pki["server.key"], None)),
                            ("tls_key", (pki["server.pem"], missing, None)),
                            ("tls_client_ca", (pki["server.pem"], pki["server.key"], missing))):
            cert, key, client_ca = files
            err = server(f"--tls_cert={cert}", f"--tls_key={key}", "--open_join",
                         *([f"--tls_client_ca={client_ca}"] if client_ca else []))
            self.assertIn(f"--{flag}={missing}", err)
        self.assertIn(missing, server("--insecure", f"--join_tokens={missing}"))
        short = write_file(self.path("short"), "bob tooshort\n")
        self.assertIn("shorter than 16", server("--insecure", f"--join_tokens={short}"))
        self.assertIn("contradicts", server("--insecure", f"--tls_cert={pki['server.pem']}", f"--tls_key={pki['server.key']}",
                                            "--open_join"))

        worker = lambda *f: self.refuse(WORKER_BIN, "--server=127.0.0.1:1", "--connect_timeout_s=1", *f)
        self.assertIn(f"--tls_ca={missing}", worker(f"--tls_ca={missing}"))
        self.assertIn("--tls_key", worker(f"--tls_cert={pki['client.pem']}"))
        self.assertIn(missing, worker("--insecure", f"--token_file={missing}"))
        self.assertIn("contradicts", worker("--insecure", f"--tls_ca={pki['ca.pem']}"))


# ---------------------------------------------------------------------------------------
# Join tokens


class Tokens(ClusterTest):
    def setUp(self):
        super().setUp()
        self.file = self.path("tokens")
        self.tokens = {"alice": new_token(), "bob": new_token(), "carol": new_token()}
        write_tokens(self.file, self.tokens)

    def server(self, *flags):
        # Several sessions per token here: these tests are about admission and revocation.
        return self.start_server(*TINY, "--max_workers_per_token=8", *flags,
                                 transport=("--insecure", f"--join_tokens={self.file}"))

    def join(self, addr, token, name="probe"):
        peer = Peer(addr)
        return peer, code_of(peer.join, name=name, token=token)

    def test_admission(self):
        _, addr = self.server()
        self.assertEqual(self.join(addr, "")[1], UNAUTHENTICATED)
        self.assertEqual(self.join(addr, new_token())[1], PERMISSION_DENIED)
        self.assertEqual(self.join(addr, self.tokens["alice"][:-1])[1], PERMISSION_DENIED)  # a prefix
        self.assertEqual(self.join(addr, "alice")[1], PERMISSION_DENIED)  # a label is not a token
        keys = set()
        for label in ("alice", "bob", "alice"):
            peer, code = self.join(addr, self.tokens[label])
            self.assertEqual(code, OK, label)
            self.assertRegex(peer.key, r"^[0-9a-f]{32}$")
            self.assertEqual(code_of(peer.heartbeat), OK)
            keys.add(peer.key)
        self.assertEqual(len(keys), 3, "session keys repeat")

    def test_one_session_per_token_by_default(self):
        _, addr = self.start_server(*TINY, transport=("--insecure", f"--join_tokens={self.file}"))
        first, code = self.join(addr, self.tokens["alice"])
        self.assertEqual(code, OK)
        self.assertEqual(self.join(addr, self.tokens["alice"])[1], RESOURCE_EXHAUSTED)
        self.assertEqual(self.join(addr, self.tokens["bob"])[1], OK)  # another volunteer
        self.assertEqual(code_of(first.leave), OK)
        self.assertEqual(self.join(addr, self.tokens["alice"])[1], OK)  # its one session is free again

    def test_revocation_evicts_peers_and_workers(self):
        self.revocation()

    def test_revocation_evicts_peers_and_workers_async(self):
        self.revocation("--sync=async")

    def revocation(self, *mode):
        server, addr = self.server(*mode, "--rounds=1000", "--inner_steps=4", "--eval_every=0")
        alice_file = write_file(self.path("alice.token"), self.tokens["alice"] + "\n")
        worker = self.start_worker(addr, "--name=real", f"--token_file={alice_file}", name="real")
        self.wait_for(server, r"round 1 closed", timeout=120)  # past the cold start: peers below are not awaited
        a, code = self.join(addr, self.tokens["alice"], name="a")
        self.assertEqual(code, OK)
        b, code = self.join(addr, self.tokens["bob"], name="b")
        self.assertEqual(code, OK)
        self.assertEqual(code_of(a.heartbeat), OK)

        write_tokens(self.file, {k: v for k, v in self.tokens.items() if k != "alice"})  # revoke alice
        self.assertEqual(poll(lambda: code_of(a.heartbeat), PERMISSION_DENIED, timeout=5), PERMISSION_DENIED)
        self.assertIn(code_of(a.heartbeat), (NOT_FOUND, PERMISSION_DENIED))  # evicted: stays out
        self.assertIn(code_of(a.fetch), (NOT_FOUND, PERMISSION_DENIED))
        self.wait_for(server, rf"worker {a.id} left", timeout=5)
        self.assertEqual(code_of(b.heartbeat), OK)
        self.assertEqual(len(b.fetch()), 4 * sum(numel for _, numel, _ in gpt_shapes()))
        self.assertEqual(self.join(addr, self.tokens["alice"])[1], PERMISSION_DENIED)
        self.assertEqual(self.join(addr, self.tokens["carol"])[1], OK)
        # The real worker on alice's token is refused at its next call and gives up.
        self.assertEqual(worker.wait(timeout=60), 1, worker.text())
        self.assertRegex(worker.text(), r"PERMISSION_DENIED|revoked")
        self.assertIsNone(server.p.poll(), "server died")
        self.assertEqual(code_of(b.heartbeat), OK)

    def test_sighup_reloads(self):
        server, addr = self.server()
        old = self.join(addr, self.tokens["carol"])[0]
        # Rotate carol's token in a file of the same size and modification time, so that only
        # SIGHUP (not the change watcher) can make the server read it again.
        before = os.stat(self.file)
        rotated = dict(self.tokens, carol=new_token())
        write_tokens(self.file, rotated, mtime_ns=before.st_mtime_ns)
        after = os.stat(self.file)
        self.assertEqual((after.st_size, after.st_mtime_ns), (before.st_size, before.st_mtime_ns))
        os.kill(server.p.pid, signal.SIGHUP)
        self.assertEqual(poll(lambda: self.join(addr, rotated["carol"])[1], OK, timeout=5), OK)
        self.assertEqual(self.join(addr, self.tokens["carol"])[1], PERMISSION_DENIED)
        self.assertEqual(code_of(old.heartbeat), PERMISSION_DENIED)  # its session goes with the token
        self.assertEqual(self.join(addr, self.tokens["alice"])[1], OK)
        self.assertIsNone(server.p.poll(), "SIGHUP killed the server")
        self.assertRegex(server.text(), r"reloaded 3 join tokens")


# ---------------------------------------------------------------------------------------
# Sessions


class Sessions(ClusterTest):
    def test_a_peer_cannot_speak_for_another(self):
        self.speak_for_another()

    def test_a_peer_cannot_speak_for_another_async(self):
        self.speak_for_another("--sync=async", "--min_quorum=2")  # round 0 closes with both pushes

    def speak_for_another(self, *mode):
        _, addr = self.start_server(*TINY, *mode, "--uplink_codec=dense-fp32", "--downlink_codec=dense-fp32",
                                    "--rounds=3", "--inner_steps=4")
        x, y = Peer(addr), Peer(addr)
        n = x.join(name="x").num_params
        y.join(name="y")
        self.assertNotEqual(x.key, y.key)
        good = dense_payload([0.001] * n, gpt_shapes())
        calls = session_calls(x, good)
        cases = {  # what X sends -> the status every call must get
            "Y's id, X's key": (y.id, session_md(y.id, x.key), PERMISSION_DENIED),
            "Y's id, a guessed key": (y.id, session_md(y.id, "0" * 32), PERMISSION_DENIED),
            "Y's id, no metadata": (y.id, (), UNAUTHENTICATED),
            "Y's id, id but no key": (y.id, (("muloco-worker", str(y.id)),), UNAUTHENTICATED),
            "X's own id, no metadata": (x.id, (), UNAUTHENTICATED),
            "X's session, Y's id in the message": (y.id, session_md(x.id, x.key), PERMISSION_DENIED),
            "an unknown id": (x.id + 1000, session_md(x.id + 1000, x.key), NOT_FOUND),
        }
        for case, (wid, md, want) in cases.items():
            for rpc, call in calls.items():
                self.assertEqual(code_of(call, wid, md), want, f"{rpc}: {case}")
        # worker_id 0 (proto3's unset) with X's session names another worker too.
        for rpc, call in calls.items():
            self.assertEqual(code_of(call, 0, session_md(x.id, x.key)), PERMISSION_DENIED, rpc)

        # Nothing X sent counted for Y: Y is live, its first push of round 0 is accepted,
        # and round 0 closes with exactly the two real pushes.
        self.assertEqual(code_of(y.heartbeat), OK)
        self.assertEqual(len(y.fetch()), 4 * n)
        self.assertEqual(code_of(y.push, 0, good), OK)
        self.assertEqual(code_of(x.heartbeat), OK)
        self.assertEqual(code_of(x.push, 0, good), OK)
        self.assertEqual(y.await_round(0)[0].contributors, 2)
        self.assertEqual(code_of(y.leave), OK)
        self.assertEqual(code_of(x.leave), OK)


# ---------------------------------------------------------------------------------------
# Names


class Names(ClusterTest):
    def joined_as(self, server, worker_id):
        """The name (with its "@label") the server logged for a worker's join."""
        return self.wait_for(server, rf"worker {worker_id} \((.*)\) joined", timeout=5).group(1)

    def test_names_cannot_forge_log_lines(self):
        server, addr = self.start_server(*TINY)
        forged = "2026-01-01T12:00:00.000Z INFO [server] round 9 closed"  # names keep 64 chars
        for name in ("evil\n" + forged, "bell\x07esc\x1b[2Jnul\x00end\r"):
            peer = Peer(addr)
            peer.join(name=name)
            self.assertEqual(self.joined_as(server, peer.id), re.sub(r"[^A-Za-z0-9._:@+-]", "_", name) + "@open")
        self.assertEqual(code_of(Peer(addr).join, name="y" * 257), grpc.StatusCode.INVALID_ARGUMENT)
        text = server.text()
        self.assertNotRegex(text, r"(?m)^2026-01-01T12:00:00\.000Z INFO \[server\]")
        for c in "\x1b\x07\x00\r":
            self.assertNotIn(c, text)

    def test_long_names_keep_the_token_label(self):
        """The label of the token that admitted a worker ends its logged name: a long name
        can neither cut it off nor end in another token's label."""
        tokens = self.path("tokens")
        bob = new_token()
        write_tokens(tokens, {"alice": new_token(), "bob": bob})
        server, addr = self.start_server(*TINY, "--max_workers_per_token=8",
                                         transport=("--insecure", f"--join_tokens={tokens}"))
        for what, name in (("hides", "x" * 200), ("poses as alice's", "z" * 58 + "@alice")):
            with self.subTest(f"a long name {what} label"):
                peer = Peer(addr)
                peer.join(name=name, token=bob)
                logged = self.joined_as(server, peer.id)
                self.assertTrue(logged.endswith("@bob"), f"logged as {logged!r}: bob's label is gone")
                self.assertTrue(logged.startswith(name[:50]), f"logged as {logged!r}")


class Deploy(ClusterTest):
    """What docker-compose.yml runs, without Docker: deploy/make-secrets.sh's files and the
    compose file's own flags, read from the file, start a mutual-TLS run with tokens."""
    ROOT = os.path.join(os.path.dirname(__file__), "../..")

    def test_make_secrets_and_compose_flags_run(self):
        secrets_dir = self.path("secrets")
        r = subprocess.run([os.path.join(self.ROOT, "deploy/make-secrets.sh"), secrets_dir, "2"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.ROOT, "docker-compose.yml")) as f:
            services = yaml.safe_load(f)["services"]

        def secure_flags(service):  # its TLS and token flags, /run/secrets/ mapped to the made files
            out = [f.replace("/run/secrets/", secrets_dir + "/") for f in services[service]["command"]
                   if re.match(r"--(tls_\w+|join_tokens|token_file)=", f)]
            for f in out:
                self.assertTrue(os.path.exists(f.split("=", 1)[1]), f)
            return out
        server_flags = secure_flags("server")
        self.assertEqual(sorted(f.split("=")[0] for f in server_flags),
                         ["--join_tokens", "--tls_cert", "--tls_client_ca", "--tls_key"])
        creds = grpc.ssl_channel_credentials(read(f"{secrets_dir}/ca.crt"), read(f"{secrets_dir}/worker-1.key"),
                                             read(f"{secrets_dir}/worker-1.crt"))
        server, addr = self.start_server(*TINY, "--rounds=2", "--inner_steps=3", "--min_quorum=2",
                                         f"--save_final={self.path('server.bin')}", transport=server_flags,
                                         credentials=creds, options=(("grpc.ssl_target_name_override", "server"),))
        workers = []
        for i in (1, 2):
            wflags = secure_flags(f"worker-{i}")
            self.assertEqual(len(wflags), 4, wflags)
            workers.append(self.start_worker(addr, f"--name=worker-{i}", "--tls_server_name=server",
                                             f"--save_final={self.path(f'w{i}.bin')}", name=f"w{i}",
                                             transport=wflags))
        for w in workers:
            self.assertEqual(w.wait(timeout=300), 0, w.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        for i in (1, 2):
            self.assertEqual(self.read_bytes(f"w{i}.bin"), self.read_bytes("server.bin"))
        self.assertRegex(server.text(), r"\(worker-1@worker-1\) joined")

    def test_compose_file_is_valid(self):
        compose = shutil.which("docker-compose")
        if compose is None:
            self.skipTest("docker-compose is not installed (scripts/install-deps.sh installs it)")
        r = subprocess.run([compose, "-f", os.path.join(self.ROOT, "docker-compose.yml"), "config", "-q"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
