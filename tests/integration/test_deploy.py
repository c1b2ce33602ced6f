"""What `docker compose up` ships, checked without Docker:
- Images: every shared library the built binaries need (`readelf -d`, NEEDED) comes from a
  Debian package that deploy/Dockerfile installs in the binary's runtime stages (server:
  runtime-base; worker: runtime-base + worker), unless debian:12-slim already has it; the
  server image creates its checkpoint directory for the unprivileged user.
- Compose: `docker-compose config -q` accepts docker-compose.yml (with deploy/make-secrets.sh's
  files, in a copy of the tree); the server's --checkpoint_dir is a named volume; Prometheus
  scrapes only the server, at the port its --metrics_listen names.
- Grafana: the provisioning and the dashboard parse, every panel names the provisioned data
  source, the dashboard provider reads the directory compose mounts, every expression is
  valid PromQL (promtool), and every metric name the dashboard uses is exported by a real
  server with a real worker joined (per-worker series come from the server, label `worker`).
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request

import yaml

from harness import BUILD, SERVER_BIN, TINY, WORKER_BIN, ClusterTest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
DOCKERFILE = os.path.join(ROOT, "deploy/Dockerfile")
COMPOSE = os.path.join(ROOT, "docker-compose.yml")
PROMETHEUS = os.path.join(ROOT, "deploy/prometheus.yml")
GRAFANA = os.path.join(ROOT, "deploy/grafana")
DATASOURCES = os.path.join(GRAFANA, "provisioning/datasources/prometheus.yml")
PROVIDERS = os.path.join(GRAFANA, "provisioning/dashboards/muloco.yml")
DASHBOARD = os.path.join(GRAFANA, "dashboards/muloco.json")

# Packages debian:12-slim already carries, so the Dockerfile need not name them: libc6 and
# libgcc-s1 (Essential / Priority required), libstdc++6 (apt depends on it) and zlib1g (dpkg
# depends on it). Kept short on purpose: anything else a binary needs must be installed.
SLIM_BASE_IMAGE = "debian:12-slim"
SLIM_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}

# Metric families that exist only once their event has happened (prometheus-cpp writes no
# family without a sample): muloco_screened_updates_total appears with the first update that
# robust screening clipped or left out. The live test cannot provoke that with one honest
# worker, so for these it checks that the server's sources name the family.
EVENT_ONLY_METRICS = {"muloco_screened_updates_total"}

# What the dashboard must show (the list), by the metric names that carry it.
DASHBOARD_MUST_USE = {
    "bytes up/down per worker": ["muloco_worker_uplink_bytes_total", "muloco_worker_downlink_bytes_total"],
    "compression ratio": ["muloco_dense_payload_bytes", "muloco_pushes_total", "muloco_uplink_bytes_total",
                          "muloco_rounds_closed_total", "muloco_downlink_payload_bytes_total"],
    "train and validation loss": ["muloco_worker_train_loss", "muloco_worker_val_loss"],
    "round duration": ["muloco_round_duration_seconds_bucket"],
    "live workers": ["muloco_live_workers"],
    "stragglers": ["muloco_stragglers_total"],
    "rejected and refused calls": ["muloco_rejected_pushes_total", "muloco_refused_calls_total"],
    "screened updates": ["muloco_screened_updates_total"],
    "tokens/s per worker": ["muloco_worker_tokens_per_second"],
    "push and fetch durations": ["muloco_push_duration_seconds_bucket", "muloco_fetch_duration_seconds_bucket"],
    "EF residual norm": ["muloco_worker_ef_residual_norm"],
    "staleness": ["muloco_worker_staleness_rounds"],
    "time waiting for the server": ["muloco_worker_wait_seconds"],
}


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def flag(command, name):
    """The value of --name=VALUE in a compose command list (None when absent)."""
    for arg in command:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


# ---- deploy/Dockerfile ------------------------------------------------------------------

def dockerfile_stages(path=DOCKERFILE):
    """{stage name: {"base": FROM image or stage, "instructions": [(OP, args)]}} in file order.
    Continuation lines are joined and comment lines dropped, as Docker reads them."""
    with open(path) as f:
        raw = f.read().splitlines()
    logical, current = [], ""
    for line in raw:
        if re.match(r"\s*#", line) and not current.strip():
            continue
        if re.match(r"\s*#", line):  # a comment inside a continued instruction
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            logical.append(current.strip())
        current = ""
    stages, stage = {}, None
    for line in logical:
        op, _, args = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            m = re.match(r"(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.I)
            stage = {"base": m.group(1), "instructions": []}
            stages[m.group(2) or f"stage{len(stages)}"] = stage
        elif stage is not None:
            stage["instructions"].append((op, args.strip()))
    return stages


def stage_chain(stages, name):
    """[name, its base stage, ...] up to the first stage built FROM an image."""
    chain = [name]
    while stages[chain[-1]]["base"] in stages:
        chain.append(stages[chain[-1]]["base"])
    return chain


def apt_installed(stage):
    """Packages a stage's RUN instructions `apt-get install`."""
    out = set()
    for op, args in stage["instructions"]:
        if op != "RUN":
            continue
        for command in re.split(r"&&|\|\||;|\|", args):
            words = shlex.split(command)
            words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]  # VAR=value prefixes
            if len(words) >= 2 and words[0] in ("apt-get", "apt") and "install" in words:
                out |= {w for w in words[words.index("install") + 1:] if not w.startswith("-")}
    return out


def needed_libraries(binary):
    r = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout)


def resolve_libraries(binary, sonames):
    """{soname: the path the loader uses}: ldd's answer for this binary (RUNPATH included),
    else the ldconfig cache (x86-64 entries); None where neither knows it."""
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"  # /sbin may be off a user's PATH
    cache = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    out = {}
    for soname in sonames:
        m = re.search(rf"^\s*{re.escape(soname)} => (/\S+)", ldd, re.M)
        if m is None:
            m = re.search(rf"^\s*{re.escape(soname)} \([^)]*x86-64[^)]*\) => (/\S+)", cache, re.M)
        out[soname] = m.group(1) if m else None
    return out


def path_spellings(path):
    """The path, its target and their /lib <-> /usr/lib twins: with merged /usr, dpkg knows
    only the spelling the package shipped."""
    out = []
    for p in (path, os.path.realpath(path)):
        out.append(p)
        if p.startswith("/usr/lib/"):
            out.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            out.append("/usr" + p)
    return out


def debian_owners(paths):
    """{path: {Debian packages owning it, without :arch}} for the paths dpkg knows (one
    `dpkg -S` for all of them; it exits 1 when some are unknown)."""
    r = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True)
    owners = {}
    for line in r.stdout.splitlines():
        packages, sep, owned = line.rpartition(": ")
        if sep and not packages.startswith("diversion by"):
            owners.setdefault(owned, set()).update(o.strip().split(":")[0] for o in packages.split(","))
    return owners


class Images(unittest.TestCase):
    def setUp(self):
        for tool in ("readelf", "ldd", "ldconfig", "dpkg"):
            if shutil.which(tool) is None and not os.path.exists(f"/sbin/{tool}"):
                self.skipTest(f"{tool} is missing (a Debian host is needed to map libraries to packages)")
        self.stages = dockerfile_stages()

    def check_runtime(self, binary, stage):
        self.assertTrue(os.path.exists(binary), f"{binary} is not built (MULOCO_BUILD={BUILD})")
        chain = stage_chain(self.stages, stage)
        self.assertEqual(self.stages[chain[-1]]["base"], SLIM_BASE_IMAGE,
                         f"{stage} no longer builds on {SLIM_BASE_IMAGE}: review SLIM_PACKAGES")
        installed = set().union(*(apt_installed(self.stages[s]) for s in chain))
        sonames = needed_libraries(binary)
        self.assertTrue(sonames, f"readelf -d lists no NEEDED library in {binary}")
        paths = resolve_libraries(binary, sonames)
        owners = debian_owners([s for p in paths.values() if p for s in path_spellings(p)])
        needed = {}
        for soname, path in paths.items():
            self.assertIsNotNone(path, f"{os.path.basename(binary)} needs {soname}, which the loader cannot find")
            packages = next((owners[s] for s in path_spellings(path) if s in owners), set())
            if not packages and not re.match(r"/(usr/)?lib(64)?/", path):
                self.skipTest(f"{soname} comes from {path}, outside Debian's packages (a LibTorch given "
                              f"through CMAKE_PREFIX_PATH?); the image builds against Debian's own")
            self.assertTrue(packages, f"{soname} ({path}) belongs to no Debian package")
            needed[soname] = packages
        missing = {soname: sorted(p) for soname, p in needed.items()
                   if not p & SLIM_PACKAGES and not p & installed}
        self.assertFalse(missing, f"deploy/Dockerfile stages {chain} install {sorted(installed)}; "
                                  f"{os.path.basename(binary)} also needs (library: packages) {missing}")
        return needed

    def test_server_runtime_has_every_needed_library(self):
        needed = self.check_runtime(SERVER_BIN, "server")
        self.assertIn("libgrpc++1.51", set().union(*needed.values()))  # the mapping found real packages

    def test_worker_runtime_has_every_needed_library(self):
        needed = self.check_runtime(WORKER_BIN, "worker")
        self.assertEqual(needed.get("libc10.so.1.13", {"libtorch1.13"}), {"libtorch1.13"})

    def test_server_image_owns_its_checkpoint_dir(self):
        """The checkpoint directory exists in the server image and belongs to the user the
        server runs as, created before USER switches away from root."""
        command = load_yaml(COMPOSE)["services"]["server"]["command"]
        ckpt = flag(command, "checkpoint_dir")
        self.assertIsNotNone(ckpt, "the compose server has no --checkpoint_dir")
        instructions = [i for s in reversed(stage_chain(self.stages, "server"))
                        for i in self.stages[s]["instructions"]]
        users = [n for n, (op, _) in enumerate(instructions) if op == "USER"]
        self.assertTrue(users, "the server image runs as root")
        user = instructions[users[-1]][1]
        creates = [n for n, (op, args) in enumerate(instructions)
                   if op == "RUN" and re.search(rf"{re.escape(ckpt)}(\s|$|&|;)", args)
                   and re.search(rf"(-o\s+{re.escape(user)}\b|chown\s+(-\S+\s+)*{re.escape(user)}\b)", args)]
        self.assertTrue(creates, f"no RUN in the server stages creates {ckpt} owned by {user}")
        self.assertLess(creates[0], users[-1], f"{ckpt} is created after USER {user} (without root)")


# ---- docker-compose.yml and deploy/prometheus.yml ------------------------------------------

class Compose(unittest.TestCase):
    def setUp(self):
        self.compose = load_yaml(COMPOSE)
        self.services = self.compose["services"]

    def test_compose_config_is_valid(self):
        """docker-compose config -q, in a copy of the tree that has the secret files the
        compose file names (deploy/secrets is made by deploy/make-secrets.sh, never committed)."""
        compose = shutil.which("docker-compose")
        if compose is None:
            self.skipTest("docker-compose is not installed (scripts/install-deps.sh installs it)")
        tmp = tempfile.mkdtemp(prefix="muloco_compose_")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        shutil.copy(COMPOSE, tmp)
        shutil.copytree(os.path.join(ROOT, "deploy"), os.path.join(tmp, "deploy"),
                        ignore=shutil.ignore_patterns("secrets"))
        r = subprocess.run([os.path.join(tmp, "deploy/make-secrets.sh"), os.path.join(tmp, "deploy/secrets"), "2"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for name, secret in self.compose.get("secrets", {}).items():
            self.assertTrue(os.path.exists(os.path.join(tmp, secret["file"])), f"make-secrets.sh made no {name}")
        r = subprocess.run([compose, "-f", os.path.join(tmp, "docker-compose.yml"), "config", "-q"],
                           capture_output=True, text=True, cwd=tmp)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_checkpoints_live_in_a_named_volume(self):
        server = self.services["server"]
        ckpt = flag(server["command"], "checkpoint_dir")
        self.assertIsNotNone(ckpt, "the server runs without --checkpoint_dir: a restart starts over")
        named = self.compose.get("volumes") or {}
        mounts = {}
        for v in server.get("volumes", []):
            source, target = (v["source"], v["target"]) if isinstance(v, dict) else v.split(":")[:2]
            mounts[target] = source
        self.assertIn(ckpt, mounts, f"nothing is mounted at --checkpoint_dir={ckpt}: checkpoints die with the container")
        self.assertIn(mounts[ckpt], named, f"{mounts[ckpt]} is not a named volume of the compose file")

    def test_prometheus_scrapes_only_the_server(self):
        config = load_yaml(PROMETHEUS)
        targets = [t for job in config["scrape_configs"] for sc in job.get("static_configs", [])
                   for t in sc["targets"]]
        port = flag(self.services["server"]["command"], "metrics_listen").rsplit(":", 1)[1]
        self.assertEqual(targets, [f"server:{port}"])
        self.assertIn("server", self.services)
        mounted = [v for v in self.services["prometheus"]["volumes"] if v.startswith("./deploy/prometheus.yml:")]
        self.assertEqual(len(mounted), 1, self.services["prometheus"]["volumes"])


# ---- Grafana -----------------------------------------------------------------------------

def dashboard_panels(panels):
    """Every panel, rows' nested panels included (rows themselves excluded)."""
    for p in panels:
        if p.get("type") == "row":
            yield from dashboard_panels(p.get("panels", []))
        else:
            yield p


def dashboard_expressions(dashboard):
    """Every PromQL expression of the dashboard: panel targets and query variables."""
    exprs = [t["expr"] for p in dashboard_panels(dashboard["panels"]) for t in p.get("targets", []) if t.get("expr")]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var.get("query")
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def metric_names(exprs):
    return {name for e in exprs for name in re.findall(r"muloco_[a-z_]+", e)}


def container_mount(service, host_path):
    """Where `service` mounts the host path (and its mode), or (None, None)."""
    for v in service.get("volumes", []):
        parts = v.split(":")
        if os.path.normpath(parts[0]) == os.path.normpath(host_path):
            return parts[1], (parts[2] if len(parts) > 2 else "rw")
    return None, None


class Grafana(unittest.TestCase):
    def setUp(self):
        self.datasources = load_yaml(DATASOURCES)
        self.providers = load_yaml(PROVIDERS)
        self.dashboard = load_json(DASHBOARD)
        self.services = load_yaml(COMPOSE)["services"]

    def test_datasource_is_the_compose_prometheus(self):
        sources = self.datasources["datasources"]
        self.assertEqual(len(sources), 1, sources)
        ds = sources[0]
        self.assertEqual((ds["uid"], ds["type"], ds.get("isDefault")), ("muloco-prometheus", "prometheus", True))
        m = re.match(r"http://([\w.-]+):(\d+)$", ds["url"])
        self.assertTrue(m, ds["url"])
        self.assertIn(m.group(1), self.services, "the data source's host is no compose service")
        self.assertEqual(m.group(2), "9090")  # prometheus' default --web.listen-address
        self.assertNotIn("--web.listen-address", " ".join(self.services[m.group(1)].get("command", [])))

    def test_every_panel_uses_the_provisioned_datasource(self):
        uids = {ds["uid"] for ds in self.datasources["datasources"]}
        self.assertEqual((self.dashboard["uid"], self.dashboard["title"]), ("muloco", "muloco"))
        panels = list(dashboard_panels(self.dashboard["panels"]))
        self.assertGreaterEqual(len(panels), 12)
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        for p in panels:
            self.assertIn(p.get("datasource", {}).get("uid"), uids, p["title"])
            self.assertTrue(p.get("targets"), f"{p['title']} has no query")
            for t in p["targets"]:
                self.assertIn(t.get("datasource", p["datasource"]).get("uid"), uids, p["title"])
        for var in self.dashboard.get("templating", {}).get("list", []):
            if var.get("type") == "query":
                self.assertIn(var["datasource"]["uid"], uids, var["name"])

    def test_compose_mounts_what_the_provider_reads(self):
        grafana = self.services["grafana"]
        self.assertEqual(grafana["image"], "grafana/grafana:10.4.2")
        self.assertIn("prometheus", grafana.get("depends_on", []))
        env = grafana.get("environment", {})
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        self.assertEqual(str(env.get("GF_AUTH_ANONYMOUS_ENABLED")).lower(), "true")
        self.assertTrue(any(str(p).split(":")[-1] == "3000" for p in grafana.get("ports", [])), grafana.get("ports"))
        prov, mode = container_mount(grafana, "./deploy/grafana/provisioning")
        self.assertEqual((prov, mode), ("/etc/grafana/provisioning", "ro"))
        dashboards, _ = container_mount(grafana, "./deploy/grafana/dashboards")
        self.assertIsNotNone(dashboards, grafana["volumes"])
        providers = self.providers["providers"]
        self.assertEqual([p["type"] for p in providers], ["file"])
        self.assertEqual(os.path.normpath(providers[0]["options"]["path"]), os.path.normpath(dashboards))
        # The provider's dashboards directory holds this dashboard, and the files provisioned
        # are the ones this test read (under the mounted host directory).
        self.assertTrue(os.path.exists(os.path.join(ROOT, "deploy/grafana/dashboards", "muloco.json")))
        for f in (DATASOURCES, PROVIDERS):
            self.assertTrue(os.path.abspath(f).startswith(os.path.join(ROOT, "deploy/grafana/provisioning") + os.sep))
        home = env.get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
        if home:
            self.assertEqual(os.path.dirname(home), os.path.normpath(dashboards))
            self.assertTrue(os.path.exists(os.path.join(GRAFANA, "dashboards", os.path.basename(home))), home)

    def test_dashboard_shows_what_operators_need(self):
        used = metric_names(dashboard_expressions(self.dashboard))
        missing = {what: [n for n in names if n not in used] for what, names in DASHBOARD_MUST_USE.items()}
        self.assertFalse({k: v for k, v in missing.items() if v}, "the dashboard does not show")
        per_worker = [t for p in dashboard_panels(self.dashboard["panels"]) for t in p["targets"]
                      if "muloco_worker_" in t["expr"] and "{{worker}}" in t.get("legendFormat", "")]
        self.assertGreaterEqual(len(per_worker), 8, "per-worker panels should name their series by worker")

    def test_every_expression_is_valid_promql(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool is not installed (scripts/install-deps.sh installs prometheus)")
        exprs = [e for e in dashboard_expressions(self.dashboard) if not e.startswith("label_values(")]
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"muloco_dashboard:expr{i}", "expr": e.replace("$worker", ".+")} for i, e in enumerate(exprs)]}]}
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
            yaml.safe_dump(rules, f)
        self.addCleanup(os.unlink, f.name)
        r = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


# ---- the dashboard against a real server's /metrics ------------------------------------------

def exposition(text):
    """(sample names, {family: TYPE}) of a Prometheus text exposition."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    samples = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{.*\})? \S+", text, re.M))
    return samples, types


def unexported(names, samples, types):
    """The names a query cannot find: a histogram's _bucket needs `# TYPE BASE histogram`,
    _sum/_count need a histogram or summary BASE; any other name needs samples of its own."""
    missing = set()
    for n in names:
        m = re.match(r"(.+)_(bucket|sum|count)$", n)
        if m and types.get(m.group(1)) == "histogram":
            continue
        if m and m.group(2) != "bucket" and types.get(m.group(1)) == "summary":
            continue
        if n in samples and types.get(n) not in ("histogram", "summary"):
            continue
        missing.add(n)
    return missing


class DashboardMetrics(ClusterTest):
    def test_every_dashboard_metric_is_exported(self):
        names = metric_names(dashboard_expressions(load_json(DASHBOARD)))
        self.assertGreaterEqual(len(names), 20)
        server, addr = self.start_server(*TINY, "--rounds=1000", "--inner_steps=4", "--metrics_listen=127.0.0.1:0")
        port = int(self.wait_for(server, r"metrics on port (\d+)", 30).group(1))
        self.start_worker(addr, "--name=w0")
        live = names - EVENT_ONLY_METRICS
        deadline = time.time() + 60
        text, have_worker, missing = "", False, live
        while time.time() < deadline:
            self.assertIsNone(server.p.poll(), "server died:\n" + server.text()[-3000:])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            have_worker = re.search(r'^muloco_worker_round\{[^}]*worker="w0@[^"]*"', text, re.M) is not None
            missing = unexported(live, *exposition(text))
            if have_worker and not missing:
                break
            time.sleep(0.5)
        self.assertTrue(have_worker, "the server never re-exported worker w0 (muloco_worker_round{worker=\"w0@...\"}):\n"
                        + "\n".join(l for l in text.splitlines() if l.startswith("muloco_worker")))
        samples, types = exposition(text)
        self.assertFalse(missing, f"the dashboard queries names the server does not export: {sorted(missing)}; "
                                  f"exported: {sorted(set(types) | samples)}")
        # Families that appear only after their event: the server's sources must name them.
        sources = ""
        for folder in ("server", "common"):
            for f in sorted(os.listdir(os.path.join(ROOT, folder))):
                if f.endswith(".cc"):
                    with open(os.path.join(ROOT, folder, f)) as fh:
                        sources += fh.read()
        for n in names & EVENT_ONLY_METRICS:
            self.assertIn(f'"{n}"', sources, f"{n}: not exported and named nowhere in server/ or common/")


if __name__ == "__main__":
    unittest.main()
