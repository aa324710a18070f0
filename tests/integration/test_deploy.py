#!/usr/bin/python3
"""The deployment files under deploy/ and the Python client's session routing header.

Replicas sharing durable sessions (--session_dir) only work if every call on a session reaches
the replica holding it. These tests check the pieces that make that so, without Docker or a
cluster: every YAML and JSON file parses; compose runs >= 2 replicas on one shared volume
mounted where --session_dir points, behind an nginx router whose config hashes
`x-mnemo-session` onto a consistent ring of exactly those replicas; Envoy does the same with
RING_HASH; Prometheus scrapes every replica; every Grafana query names metrics the server
exports; the Kubernetes manifests have the shared ReadWriteMany claim, preStop drain, a
PodDisruptionBudget, the queue-driven HorizontalPodAutoscaler and a router listing the
StatefulSet's pods. Last, mnemo_client sends the header on every call that names a session
and on no other (against an in-process fake server that records metadata).

Run by CTest with Debian's /usr/bin/python3 (PyYAML, grpcio); needs no binaries.
"""

import glob
import json
import os
import re
import sys
import unittest
from concurrent import futures

import yaml

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.environ.get("MNEMO_SOURCE_DIR", os.path.dirname(os.path.dirname(_HERE)))
sys.path.insert(0, os.path.join(_ROOT, "clients", "python"))

import grpc  # noqa: E402

from mnemo_client import Client, MnemoError  # noqa: E402

DEPLOY = os.path.join(_ROOT, "deploy")
SESSION_HEADER = "x-mnemo-session"
GRPC_PORT = 50051
METRICS_PORT = 9090

# Metrics added by durable sessions (issue 23). They may not be registered in server/ yet;
# once they are, this list only repeats what the source already says.
NEW_METRICS = {
    "mnemo_session_snapshots_total",
    "mnemo_session_restores_total",
    "mnemo_session_log_bytes_total",
    "mnemo_session_snapshot_seconds",
    "mnemo_session_restore_seconds",
    "mnemo_sessions_on_disk",
}
# Series Prometheus derives from a histogram's name.
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def deploy_path(*parts):
    return os.path.join(DEPLOY, *parts)


def load_yaml(path):
    """Every document of a YAML file (empty documents dropped)."""
    with open(path, encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def server_metric_names():
    """Every "mnemo_..." string literal in server/ (metrics.cc registers them by name)."""
    names = set()
    for path in glob.glob(os.path.join(_ROOT, "server", "*.cc")) + \
            glob.glob(os.path.join(_ROOT, "server", "*.h")):
        with open(path, encoding="utf-8") as f:
            names.update(re.findall(r'"(mnemo_[a-z0-9_]+)"', f.read()))
    return names


def flag_value(args, flag):
    """The value of `--flag VALUE` or `--flag=VALUE` in an argument list, else None."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def duration_seconds(text):
    """'45s', '1m', '1h', '3600' (nginx: bare seconds) -> seconds."""
    match = re.fullmatch(r"(\d+)(ms|s|m|h)?", text)
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    return int(match.group(1)) * scale


# --- nginx ----------------------------------------------------------------------------------

class NginxConf:
    """The parts of an nginx gRPC router config these tests read (comments stripped)."""

    def __init__(self, text):
        self.text = re.sub(r"#[^\n]*", "", text)
        upstreams = re.findall(r"upstream\s+(\S+)\s*\{([^}]*)\}", self.text)
        if len(upstreams) != 1:
            raise AssertionError(f"expected one upstream block, found {len(upstreams)}")
        self.upstream, body = upstreams[0]
        self.upstream_body = body
        self.servers = re.findall(r"^\s*server\s+([^\s;]+)", body, re.M)

    def directive(self, name):
        """Arguments of the first `name ...;` outside the upstream block, or None."""
        outside = self.text.replace(self.upstream_body, "")
        match = re.search(r"^\s*" + re.escape(name) + r"\s+([^;]*);", outside, re.M)
        return match.group(1).split() if match else None


def check_nginx_router(test, text, hosts):
    """Asserts `text` routes gRPC on a consistent hash of x-mnemo-session to exactly
    `hosts` (each on GRPC_PORT), over HTTP/2, with timeouts fit for long streams."""
    conf = NginxConf(text)
    test.assertRegex(conf.upstream_body, r"(?m)^\s*hash\s+\$http_x_mnemo_session\s+consistent;")
    test.assertEqual(sorted(conf.servers), sorted(f"{h}:{GRPC_PORT}" for h in hosts))
    test.assertEqual(conf.directive("grpc_pass"), [f"grpc://{conf.upstream}"])
    listen = conf.directive("listen")
    test.assertIsNotNone(listen)
    test.assertEqual(listen[0].rsplit(":", 1)[-1], str(GRPC_PORT))
    test.assertTrue("http2" in listen or conf.directive("http2") == ["on"],
                    "the listener must speak HTTP/2 (gRPC)")
    for name in ("grpc_read_timeout", "grpc_send_timeout"):
        value = conf.directive(name)
        test.assertIsNotNone(value, f"{name} unset: nginx's 60 s default cuts long streams")
        test.assertGreaterEqual(duration_seconds(value[0]), 600, name)
    # nginx refuses bodies over 1 MiB by default; mnemo accepts up to --max_request_bytes.
    test.assertIsNotNone(conf.directive("client_max_body_size"))


# --- Envoy ----------------------------------------------------------------------------------

def check_envoy_router(test, config, hosts=None):
    """Asserts an Envoy bootstrap routes every route on a hash of x-mnemo-session to a
    RING_HASH cluster spoken to in HTTP/2; with `hosts`, that its endpoints are those."""
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    routes = []
    for listener in config["static_resources"]["listeners"]:
        for chain in listener["filter_chains"]:
            for filt in chain["filters"]:
                for vhost in filt["typed_config"]["route_config"]["virtual_hosts"]:
                    routes.extend(vhost["routes"])
    test.assertTrue(routes)
    for route in routes:
        action = route["route"]
        test.assertIn({"header": {"header_name": SESSION_HEADER}}, action["hash_policy"])
        cluster = clusters[action["cluster"]]
        test.assertEqual(cluster["lb_policy"], "RING_HASH")
        options = cluster["typed_extension_protocol_options"][
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        test.assertIn("http2_protocol_options", options["explicit_http_config"])
        if hosts is not None:
            addresses = [e["endpoint"]["address"]["socket_address"]
                         for group in cluster["load_assignment"]["endpoints"]
                         for e in group["lb_endpoints"]]
            test.assertEqual(sorted((a["address"], a["port_value"]) for a in addresses),
                             sorted((h, GRPC_PORT) for h in hosts))


# --- Tests ----------------------------------------------------------------------------------

class FilesParseTest(unittest.TestCase):

    def test_every_yaml_and_json_file_parses(self):
        yaml_files = [p for ext in ("yaml", "yml")
                      for p in glob.glob(deploy_path("**", f"*.{ext}"), recursive=True)]
        json_files = glob.glob(deploy_path("**", "*.json"), recursive=True)
        self.assertGreaterEqual(len(yaml_files), 8)
        self.assertGreaterEqual(len(json_files), 1)
        for path in yaml_files:
            with self.subTest(path=os.path.relpath(path, _ROOT)):
                self.assertTrue(load_yaml(path))
        for path in json_files:
            with self.subTest(path=os.path.relpath(path, _ROOT)):
                with open(path, encoding="utf-8") as f:
                    json.load(f)


class ComposeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        (cls.compose,) = load_yaml(deploy_path("docker-compose.yml"))
        cls.services = cls.compose["services"]
        # The replicas: services running the image built from the repository's Dockerfile.
        cls.replicas = {name: s for name, s in cls.services.items()
                        if s.get("image") == "mnemo:latest"}

    def test_replicas_share_one_volume_at_session_dir(self):
        self.assertGreaterEqual(len(self.replicas), 2)
        sources = set()
        for name, service in self.replicas.items():
            with self.subTest(service=name):
                session_dir = flag_value(service["command"], "--session_dir")
                self.assertIsNotNone(session_dir, "replica without --session_dir")
                mounts = dict(reversed(v.split(":")[:2]) for v in service["volumes"])
                self.assertIn(session_dir, mounts, "--session_dir is not a mounted volume")
                sources.add(mounts[session_dir])
                # Draining on SIGTERM needs more time than Docker's default 10 s.
                grace = flag_value(service["command"], "--grace_period") or "10s"
                self.assertGreater(duration_seconds(service["stop_grace_period"]),
                                   duration_seconds(grace))
        self.assertEqual(len(sources), 1, f"replicas mount different volumes: {sources}")
        (volume,) = sources
        self.assertIn(volume, self.compose["volumes"], "a named volume, not a host path")

    def test_bind_mounts_exist(self):
        for name, service in self.services.items():
            for volume in service.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("."):
                    with self.subTest(service=name, source=source):
                        self.assertTrue(os.path.exists(deploy_path(source)))

    def test_nginx_router_in_front_of_every_replica(self):
        routers = {name: s for name, s in self.services.items()
                   if str(s.get("image", "")).startswith("nginx")}
        self.assertEqual(len(routers), 1)
        (router,) = routers.values()
        self.assertIn(f"{GRPC_PORT}:{GRPC_PORT}", router["ports"])
        for replica in self.replicas.values():
            self.assertNotIn(f"{GRPC_PORT}:{GRPC_PORT}", replica.get("ports", []),
                             "clients must reach replicas through the router")
        (conf,) = [v.split(":")[0] for v in router["volumes"] if "nginx" in v]
        self.assertEqual(os.path.normpath(deploy_path(conf)), deploy_path("nginx", "mnemo.conf"))
        with open(deploy_path("nginx", "mnemo.conf"), encoding="utf-8") as f:
            check_nginx_router(self, f.read(), self.replicas)

    def test_envoy_routes_to_every_replica(self):
        (config,) = load_yaml(deploy_path("envoy", "envoy.yaml"))
        check_envoy_router(self, config, self.replicas)

    def test_prometheus_scrapes_every_replica(self):
        (config,) = load_yaml(deploy_path("prometheus.yml"))
        targets = [t for job in config["scrape_configs"] for group in job["static_configs"]
                   for t in group["targets"]]
        self.assertEqual(sorted(targets), sorted(f"{r}:{METRICS_PORT}" for r in self.replicas))

    def test_grafana_provisioning_is_mounted(self):
        (grafana,) = [s for s in self.services.values()
                      if str(s.get("image", "")).startswith("grafana/")]
        mounts = dict(reversed(v.split(":")[:2]) for v in grafana["volumes"])
        (provider,) = load_yaml(deploy_path("grafana", "provisioning", "dashboards",
                                            "mnemo.yaml"))
        path = provider["providers"][0]["options"]["path"]
        self.assertIn(path, mounts)
        self.assertTrue(os.path.isfile(deploy_path(mounts[path], "mnemo.json")))


class GrafanaTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(deploy_path("grafana", "dashboards", "mnemo.json"), encoding="utf-8") as f:
            cls.dashboard = json.load(f)
        cls.exprs = [t["expr"] for p in cls.dashboard["panels"] for t in p.get("targets", [])]

    @staticmethod
    def base_name(series):
        for suffix in HISTOGRAM_SUFFIXES:
            if series.endswith(suffix):
                return series[:-len(suffix)]
        return series

    def test_every_query_names_a_real_metric(self):
        exported = server_metric_names()
        self.assertIn("mnemo_requests_waiting", exported, "metric names not found in server/")
        known = exported | NEW_METRICS
        for expr in self.exprs:
            series = re.findall(r"\bmnemo_[a-z0-9_]+", expr)
            self.assertTrue(series, expr)
            for name in series:
                with self.subTest(series=name):
                    self.assertTrue(name in known or self.base_name(name) in known,
                                    f"unknown metric in {expr}")

    def test_quantiles_read_buckets(self):
        for expr in self.exprs:
            if "histogram_quantile" in expr:
                with self.subTest(expr=expr):
                    self.assertRegex(expr, r"_bucket\b")
                    self.assertRegex(expr, r"by \([^)]*\ble\b")

    def test_panels_cover_what_operators_watch(self):
        used = {self.base_name(n) for e in self.exprs for n in re.findall(r"mnemo_[a-z0-9_]+", e)}
        wanted = {"mnemo_time_to_first_token_seconds", "mnemo_inter_token_latency_seconds",
                  "mnemo_generated_tokens_total", "mnemo_requests_waiting",
                  "mnemo_token_exit_layer", "mnemo_sessions", "mnemo_session_memory_bytes"}
        self.assertEqual((wanted | NEW_METRICS) - used, set())

    def test_datasource_uid_is_provisioned(self):
        (datasources,) = load_yaml(deploy_path("grafana", "provisioning", "datasources",
                                               "prometheus.yaml"))
        uids = {d["uid"] for d in datasources["datasources"]}
        for panel in self.dashboard["panels"]:
            self.assertIn(panel["datasource"]["uid"], uids, panel["title"])


class KubernetesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.files = {os.path.basename(p): load_yaml(p)
                     for p in sorted(glob.glob(deploy_path("kubernetes", "*.yaml")))}
        cls.objects = [o for docs in cls.files.values() for o in docs]

    def of_kind(self, kind, file=None):
        docs = self.files[file] if file else self.objects
        return [o for o in docs if o["kind"] == kind]

    def replicas(self):
        """The StatefulSet running the mnemo image."""
        (sts,) = [s for s in self.of_kind("StatefulSet")
                  if any(c["image"].startswith("mnemo")
                         for c in s["spec"]["template"]["spec"]["containers"])]
        return sts

    def test_replicas_mount_the_shared_claim_at_session_dir(self):
        sts = self.replicas()
        pod = sts["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        session_dir = flag_value(container["args"], "--session_dir")
        self.assertIsNotNone(session_dir)
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == session_dir]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        claim = volume["persistentVolumeClaim"]["claimName"]
        (pvc,) = [p for p in self.of_kind("PersistentVolumeClaim")
                  if p["metadata"]["name"] == claim]
        self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteMany"])
        self.assertGreaterEqual(sts["spec"]["replicas"], 2)

    def test_termination_drains(self):
        pod = self.replicas()["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(pre_stop[0], "sleep")
        grace = flag_value(container["args"], "--grace_period") or "10s"
        self.assertGreater(pod["terminationGracePeriodSeconds"],
                           duration_seconds(pre_stop[1]) + duration_seconds(grace),
                           "the kubelet would kill the pod before its drain ends")
        self.assertIn("readinessProbe", container)
        self.assertIn("livenessProbe", container)

    def test_disruption_budget_covers_the_replicas(self):
        labels = self.replicas()["spec"]["template"]["metadata"]["labels"]
        budgets = [b for b in self.of_kind("PodDisruptionBudget")
                   if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        self.assertEqual(len(budgets), 1)

    def test_autoscaler_scales_the_replicas_on_the_queue(self):
        (hpa,) = self.of_kind("HorizontalPodAutoscaler")
        sts = self.replicas()
        self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
        self.assertEqual((hpa["spec"]["scaleTargetRef"]["kind"],
                          hpa["spec"]["scaleTargetRef"]["name"]),
                         ("StatefulSet", sts["metadata"]["name"]))
        (metric,) = hpa["spec"]["metrics"]
        self.assertEqual(metric["type"], "Pods")
        self.assertEqual(metric["pods"]["metric"]["name"], "mnemo_requests_waiting")
        self.assertIn("mnemo_requests_waiting", server_metric_names())
        self.assertLessEqual(hpa["spec"]["minReplicas"], sts["spec"]["replicas"])

    def headless_service(self):
        sts = self.replicas()
        (svc,) = [s for s in self.of_kind("Service")
                  if s["metadata"]["name"] == sts["spec"]["serviceName"]]
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        # nginx refuses to start on a pod name that does not resolve yet.
        self.assertTrue(svc["spec"]["publishNotReadyAddresses"])
        return svc

    def check_router_file(self, file):
        """The router Deployment in `file` mounts its ConfigMap and sits behind a Service on
        GRPC_PORT; returns the ConfigMap's data."""
        (deployment,) = self.of_kind("Deployment", file)
        pod = deployment["spec"]["template"]
        (config_map,) = self.of_kind("ConfigMap", file)
        self.assertIn(config_map["metadata"]["name"],
                      [v["configMap"]["name"] for v in pod["spec"]["volumes"]])
        (service,) = self.of_kind("Service", file)
        self.assertTrue(service["spec"]["selector"].items() <= pod["metadata"]["labels"].items())
        self.assertEqual([p["port"] for p in service["spec"]["ports"]], [GRPC_PORT])
        self.assertIn("preStop", pod["spec"]["containers"][0]["lifecycle"])
        return config_map["data"]

    def test_nginx_router_lists_every_statefulset_pod(self):
        sts = self.replicas()
        service = self.headless_service()["metadata"]["name"]
        data = self.check_router_file("router.yaml")
        pods = [f"{sts['metadata']['name']}-{i}.{service}" for i in range(sts["spec"]["replicas"])]
        check_nginx_router(self, data["default.conf"], pods)

    def test_envoy_router_resolves_the_headless_service(self):
        data = self.check_router_file("router-envoy.yaml")
        check_envoy_router(self, yaml.safe_load(data["envoy.yaml"]),
                           [self.headless_service()["metadata"]["name"]])


# --- The Python client's routing header -----------------------------------------------------

class _RecordingHandler(grpc.GenericRpcHandler):
    """Records each call's method and metadata, then leaves it unhandled (UNIMPLEMENTED)."""

    def __init__(self):
        self.calls = []

    def service(self, handler_call_details):
        self.calls.append((handler_call_details.method,
                           dict(handler_call_details.invocation_metadata)))
        return None


class ClientSessionHeaderTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.handler = _RecordingHandler()
        cls.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                                 handlers=[cls.handler])
        port = cls.server.add_insecure_port("127.0.0.1:0")
        cls.server.start()
        cls.client = Client(f"127.0.0.1:{port}", timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop(None)

    def metadata_of(self, call):
        """Makes `call` (which the fake answers UNIMPLEMENTED) and returns its metadata."""
        before = len(self.handler.calls)
        with self.assertRaises(MnemoError) as raised:
            call()
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNIMPLEMENTED)
        self.assertEqual(len(self.handler.calls), before + 1)
        return self.handler.calls[-1][1]

    def test_calls_on_a_session_carry_its_id(self):
        c = self.client
        calls = {
            "generate": lambda: c.generate("x", session_id="s-1").text(),
            "generate, no prompt": lambda: list(c.generate(session_id="s-1")),
            "score": lambda: c.score("x", session_id="s-1", update_memory=True),
            "create_session": lambda: c.create_session("s-1", remember=True),
            "get_session": lambda: c.get_session("s-1"),
            "delete_session": lambda: c.delete_session("s-1"),
            "get_datastore": lambda: c.get_datastore("session", "s-1"),
            "add_to_session_datastore": lambda: c.add_to_session_datastore("s-1", "text"),
            "export_session": lambda: c.export_session("s-1"),
            "import_session": lambda: c.import_session(b"snapshot", "s-1"),
            "fork_session (routed by its source)": lambda: c.fork_session("s-1", "s-2"),
        }
        for name, call in calls.items():
            with self.subTest(call=name):
                self.assertEqual(self.metadata_of(call).get(SESSION_HEADER), "s-1")

    def test_calls_without_a_session_carry_no_header(self):
        c = self.client
        calls = {
            "generate": lambda: c.generate("x").text(),
            "score": lambda: c.score("x"),
            "tokenize": lambda: c.tokenize("x"),
            "detokenize": lambda: c.detokenize([1]),
            "create_session, server-chosen id": lambda: c.create_session(),
            "list_sessions": lambda: c.list_sessions(),
            "list_datastores": lambda: c.list_datastores(),
            "get_datastore, shared": lambda: c.get_datastore("stdlib"),
            "models": lambda: c.models(),
            "health": lambda: c.health(),
        }
        for name, call in calls.items():
            with self.subTest(call=name):
                self.assertNotIn(SESSION_HEADER, self.metadata_of(call))


if __name__ == "__main__":
    unittest.main()
