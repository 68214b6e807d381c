#!/usr/bin/env python3
"""Invariants of the Kubernetes manifests under deploy/ (issue 10).

Parses every manifest with PyYAML (in summon's Python environment) and checks
what the deployment relies on: labels, a pinned image, resources sized from
the memory budget and /dev/shm, the security context, gRPC probes, the grace
period, the update strategy, the Services, the NetworkPolicy and the
kustomize layout. The GPU overlay is checked after merging its patch into the base
(a strategic merge of the few list kinds it touches); where kubectl is
installed, `kubectl kustomize` must render base and overlay to exactly the
objects checked here (skipped without kubectl).

    scripts/python tests/deploy/manifests_test.py [DEPLOY_DIR]

DEPLOY_DIR defaults to the repository's deploy/. Under Bazel the test also
writes one JUnit case per check to $XML_OUTPUT_FILE.
"""

import os
import sys
import unittest

import yaml

from etcd_auth_manifests import EtcdAuthOverlay  # noqa: F401 (run by main)
from etcd_manifests import EtcdOverlay  # noqa: F401 (run by main)
from etcd_tls_manifests import EtcdTlsOverlay  # noqa: F401 (run by main)
from kustomize_build import (build, kubectl_build, kustomization, load_yaml,
                             manifest_files, matches, normalized, only,
                             quantity, _Recorder, write_junit)

DEPLOY = os.path.abspath(
    sys.argv[1] if len(sys.argv) > 1 else
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                 "deploy"))
BASE = os.path.join(DEPLOY, "base")
GPU = os.path.join(DEPLOY, "overlays", "gpu")
ETCD = os.path.join(DEPLOY, "overlays", "etcd")
ETCD_TLS = os.path.join(DEPLOY, "overlays", "etcd-tls")
ETCD_AUTH = os.path.join(DEPLOY, "overlays", "etcd-auth")

EtcdOverlay.directory = ETCD
EtcdOverlay.base = BASE
EtcdTlsOverlay.directory = ETCD_TLS
EtcdTlsOverlay.plaintext = ETCD
EtcdTlsOverlay.pki = os.path.join(DEPLOY, "..", "tests", "security",
                                  "make_pki.sh")
EtcdAuthOverlay.directory = ETCD_AUTH
EtcdAuthOverlay.tls = ETCD_TLS
EtcdAuthOverlay.pki = EtcdTlsOverlay.pki

LABEL_KEYS = ("name", "instance", "component", "part-of", "version",
              "managed-by")
CLUSTER_SCOPED = {"Namespace", "PriorityClass", "ClusterRole",
                  "ClusterRoleBinding", "RuntimeClass"}
# Capabilities the init container that chowns the hostPath data directory
# may add back; nothing else may add any.
INIT_CAPABILITIES = {"CHOWN", "DAC_READ_SEARCH"}
MIN_GRACE_SECONDS = 60

class Invariants:
    """Checks over the objects of one build (set in setUpClass)."""

    objects = []

    @classmethod
    def daemonset(cls):
        return only(cls.objects, "DaemonSet")

    @classmethod
    def pod(cls):
        return cls.daemonset()["spec"]["template"]["spec"]

    @classmethod
    def summond(cls):
        (c,) = [c for c in cls.pod()["containers"] if c["name"] == "summond"]
        return c

    @classmethod
    def config(cls):
        (c,) = [o for o in cls.objects if o["kind"] == "ConfigMap" and
                o["metadata"]["name"] == "summon"]
        return c["data"]

    @classmethod
    def container_port(cls, name):
        (port,) = [p["containerPort"] for p in cls.summond()["ports"]
                   if p.get("name") == name]
        return port

    def all_containers(self):
        pod = self.pod()
        return pod.get("initContainers", []) + pod["containers"]

    def test_labels_on_every_object(self):
        versions = set()
        for o in self.objects:
            labels = o["metadata"].get("labels", {})
            what = f"{o['kind']}/{o['metadata']['name']}"
            for key in LABEL_KEYS:
                value = labels.get(f"app.kubernetes.io/{key}")
                self.assertTrue(value, f"{what}: no app.kubernetes.io/{key}")
            self.assertEqual(labels["app.kubernetes.io/name"], "summon", what)
            self.assertEqual(labels["app.kubernetes.io/part-of"], "summon", what)
            self.assertEqual(labels["app.kubernetes.io/managed-by"],
                             "kustomize", what)
            versions.add(labels["app.kubernetes.io/version"])
        pod_labels = self.daemonset()["spec"]["template"]["metadata"]["labels"]
        for key in LABEL_KEYS:
            self.assertIn(f"app.kubernetes.io/{key}", pod_labels)
        versions.add(pod_labels["app.kubernetes.io/version"])
        self.assertEqual(len(versions), 1, f"versions differ: {versions}")

    def test_namespaced_objects_in_the_namespace(self):
        namespace = only(self.objects, "Namespace")["metadata"]["name"]
        for o in self.objects:
            if o["kind"] not in CLUSTER_SCOPED:
                self.assertEqual(o["metadata"].get("namespace"), namespace,
                                 f"{o['kind']}/{o['metadata']['name']}")

    def test_image_tag_pinned_to_the_version(self):
        version = self.daemonset()["metadata"]["labels"][
            "app.kubernetes.io/version"]
        for c in self.all_containers():
            image = c["image"]
            self.assertNotIn("@", image, "pin by tag (the version label)")
            repository, _, tag = image.rpartition(":")
            self.assertTrue(repository and "/" not in tag,
                            f"{c['name']}: {image} has no tag")
            self.assertNotEqual(tag, "latest", c["name"])
            self.assertEqual(tag, version, f"{c['name']}: {image} vs the "
                             f"app.kubernetes.io/version label {version}")
        # The repository's one version (summond --version, the Python package).
        with open(os.path.join(os.path.dirname(DEPLOY), "VERSION")) as f:
            self.assertEqual(version, f.read().strip(),
                             "the manifests' version is not the repository's VERSION")

    def test_selector_matches_pods_and_omits_the_version(self):
        spec = self.daemonset()["spec"]
        selector = spec["selector"]["matchLabels"]
        self.assertTrue(matches(selector, spec["template"]["metadata"]["labels"]))
        self.assertNotIn("app.kubernetes.io/version", selector,
                         "the selector is immutable: a version there blocks "
                         "every upgrade")

    def test_requests_and_limits_on_every_container(self):
        for c in self.all_containers():
            resources = c.get("resources", {})
            for kind in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    self.assertIn(resource, resources.get(kind, {}),
                                  f"{c['name']}: no {kind}.{resource}")
            for resource in ("cpu", "memory"):
                self.assertGreaterEqual(
                    quantity(resources["limits"][resource]),
                    quantity(resources["requests"][resource]),
                    f"{c['name']}: {resource} limit below its request")

    def test_memory_limit_covers_budget_shm_and_overhead(self):
        annotations = self.daemonset()["metadata"]["annotations"]
        budget = int(self.config()["memory-budget"])
        shm = quantity(annotations["summon.io/shm-size"])
        overhead = quantity(annotations["summon.io/daemon-overhead"])
        self.assertGreater(budget, 0, "size the pod from a real budget")
        resources = self.summond()["resources"]
        limit = quantity(resources["limits"]["memory"])
        self.assertGreaterEqual(
            limit, budget + shm + overhead,
            f"memory limit {limit / 2**30:g} GiB < budget "
            f"{budget / 2**30:g} + shm {shm / 2**30:g} + overhead "
            f"{overhead / 2**30:g} GiB")
        self.assertEqual(quantity(resources["requests"]["memory"]), limit,
                         "the node must reserve what the pod may use")

    def test_pod_security_context(self):
        sc = self.pod()["securityContext"]
        self.assertIs(sc.get("runAsNonRoot"), True)
        for key in ("runAsUser", "runAsGroup"):
            self.assertIsInstance(sc.get(key), int, key)
            self.assertGreater(sc[key], 0, key)
        self.assertEqual(sc.get("seccompProfile", {}).get("type"),
                         "RuntimeDefault")

    def test_container_security_context(self):
        for c in self.all_containers():
            sc = c.get("securityContext", {})
            init = c in self.pod().get("initContainers", [])
            self.assertIs(sc.get("allowPrivilegeEscalation"), False, c["name"])
            self.assertIs(sc.get("readOnlyRootFilesystem"), True, c["name"])
            self.assertNotEqual(sc.get("privileged"), True, c["name"])
            caps = sc.get("capabilities", {})
            self.assertEqual(caps.get("drop"), ["ALL"], c["name"])
            allowed = INIT_CAPABILITIES if init else set()
            self.assertLessEqual(set(caps.get("add", [])), allowed, c["name"])
            if not init:
                self.assertNotEqual(sc.get("runAsNonRoot"), False, c["name"])
                self.assertNotEqual(sc.get("runAsUser"), 0, c["name"])
        self.assertIs(self.summond()["securityContext"].get("runAsNonRoot"),
                      True)

    def test_host_network_uses_cluster_dns(self):
        pod = self.pod()
        if pod.get("hostNetwork"):
            self.assertEqual(pod.get("dnsPolicy"), "ClusterFirstWithHostNet")

    def test_host_ipc_and_shm_shared_with_trainers(self):
        pod = self.pod()
        self.assertIs(pod.get("hostIPC"), True,
                      "trainers on the node map the shards")
        (mount,) = [m for m in self.summond()["volumeMounts"]
                    if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        if "hostPath" in volume:
            self.assertEqual(volume["hostPath"]["path"], "/dev/shm")
        else:
            self.assertEqual(volume["emptyDir"].get("medium"), "Memory")
            self.assertIn("sizeLimit", volume["emptyDir"])

    def test_probes_are_grpc_on_the_health_port(self):
        c = self.summond()
        ports = {p["containerPort"] for p in c["ports"]}
        health = self.container_port("health")
        listen = self.config()["health-listen"]
        self.assertEqual(int(listen.rsplit(":", 1)[1]), health,
                         "health-listen and the health port differ")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            self.assertIn(probe, c)
            handlers = set(c[probe]) & {"grpc", "httpGet", "tcpSocket", "exec"}
            self.assertEqual(handlers, {"grpc"}, probe)
            port = c[probe]["grpc"]["port"]
            self.assertIsInstance(port, int, probe)
            self.assertIn(port, ports, probe)
            self.assertEqual(port, health, probe)

    def test_grace_period_and_pre_stop(self):
        pod = self.pod()
        grace = pod.get("terminationGracePeriodSeconds", 30)
        self.assertGreaterEqual(grace, MIN_GRACE_SECONDS)
        pre_stop = self.summond().get("lifecycle", {}).get("preStop")
        if pre_stop and "exec" in pre_stop:
            command = pre_stop["exec"]["command"]
            if command[0].endswith("sleep"):
                self.assertLess(int(command[1]), grace // 2)

    def test_update_strategy(self):
        strategy = self.daemonset()["spec"]["updateStrategy"]
        self.assertEqual(strategy["type"], "RollingUpdate")
        self.assertEqual(strategy["rollingUpdate"]["maxUnavailable"], 1)

    def test_priority_class_defined(self):
        name = self.pod().get("priorityClassName")
        self.assertTrue(name)
        classes = [o for o in self.objects if o["kind"] == "PriorityClass"]
        self.assertIn(name, [p["metadata"]["name"] for p in classes])

    def test_tolerations(self):
        tolerations = self.pod().get("tolerations")
        self.assertTrue(tolerations)
        for t in tolerations:
            self.assertIn(t.get("operator", "Equal"), ("Exists", "Equal"))

    def test_secrets_and_config_mounted_read_only(self):
        pod = self.pod()
        volumes = {v["name"]: v for v in pod["volumes"]}
        secrets = {v["secret"]["secretName"]: name
                   for name, v in volumes.items() if "secret" in v}
        for secret in ("summon-tls", "summon-client-ca", "summon-tokens"):
            self.assertIn(secret, secrets)
        self.assertFalse(volumes[secrets["summon-tls"]]["secret"].get(
            "optional", False), "TLS is not optional")
        mounted = {m["name"]: m for m in self.summond()["volumeMounts"]}
        for name, v in volumes.items():
            if "secret" in v or "configMap" in v:
                self.assertIn(name, mounted, f"volume {name} not mounted")
                self.assertIs(mounted[name].get("readOnly"), True, name)
                if "secret" in v:
                    self.assertLessEqual(v["secret"].get("defaultMode", 0o644),
                                         0o440, f"{name}: readable by others")
        # The entrypoint's default paths are where the secrets are mounted.
        paths = {s: mounted[secrets[s]]["mountPath"] for s in secrets}
        self.assertEqual(paths["summon-tls"], "/etc/summon-tls")
        self.assertEqual(paths["summon-client-ca"], "/etc/summon-client-ca")
        self.assertEqual(paths["summon-tokens"], "/etc/summon-tokens")
        self.assertEqual(paths["summon-etcd-client"], "/etc/summon-etcd")
        self.assertIs(volumes[secrets["summon-etcd-client"]]["secret"].get(
            "optional"), True, "summon-etcd-client is only for etcd")

    def test_config_has_what_the_entrypoint_reads(self):
        config = self.config()
        for key in ("nodes.txt", "local-ranks", "memory-budget",
                    "heartbeat-ms", "collective-timeout-ms"):
            self.assertIn(key, config)
        grpc = self.container_port("grpc")
        for line in config["nodes.txt"].splitlines():
            if line.strip():
                name, address = line.split()
                self.assertEqual(int(address.rsplit(":", 1)[1]), grpc, line)

    def test_metrics_port_and_scrape_annotations(self):
        metrics = self.container_port("metrics")
        self.assertEqual(metrics, 9464)
        self.assertEqual(
            int(self.config()["metrics-listen"].rsplit(":", 1)[1]), metrics)
        annotations = self.daemonset()["spec"]["template"]["metadata"][
            "annotations"]
        self.assertEqual(annotations.get("prometheus.io/scrape"), "true")
        # TLS is required (summon-tls), so the metrics listener is HTTPS.
        self.assertEqual(annotations.get("prometheus.io/scheme"), "https")
        self.assertEqual(annotations.get("prometheus.io/port"), str(metrics))

    def services(self):
        """The daemons' Services (the etcd overlay adds etcd's own)."""
        return [o for o in self.objects if o["kind"] == "Service" and
                o["metadata"]["labels"]["app.kubernetes.io/component"] ==
                "daemon"]

    def test_disruption_budget_for_the_daemons(self):
        selector = self.daemonset()["spec"]["selector"]["matchLabels"]
        (pdb,) = [o for o in self.objects
                  if o["kind"] == "PodDisruptionBudget" and
                  o["metadata"]["name"] == "summond"]
        self.assertEqual(pdb["apiVersion"], "policy/v1")
        self.assertEqual(pdb["spec"], {"maxUnavailable": 1,
                                       "selector": {"matchLabels": selector}})

    def test_services_select_the_daemons_ports(self):
        pod_labels = self.daemonset()["spec"]["template"]["metadata"]["labels"]
        names = {p["name"]: p["containerPort"] for p in self.summond()["ports"]}
        self.assertTrue(self.services())
        for s in self.services():
            self.assertTrue(matches(s["spec"]["selector"], pod_labels),
                            s["metadata"]["name"])
            for port in s["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                self.assertIn(target, set(names) | set(names.values()),
                              f"{s['metadata']['name']}: {target}")

    def test_headless_service_for_peers(self):
        headless = [s for s in self.services()
                    if s["spec"].get("clusterIP") == "None"]
        self.assertEqual(len(headless), 1)
        spec = headless[0]["spec"]
        self.assertIs(spec.get("publishNotReadyAddresses"), True,
                      "peers find each other before the cluster is READY")
        self.assertIn(self.container_port("grpc"),
                      [p["port"] for p in spec["ports"]])

    def test_node_local_service_for_trainers(self):
        local = [s for s in self.services()
                 if s["spec"].get("internalTrafficPolicy") == "Local"]
        self.assertEqual(len(local), 1)
        self.assertNotEqual(local[0]["spec"].get("clusterIP"), "None")

    def test_network_policy(self):
        policy = only(self.objects, "NetworkPolicy")
        spec = policy["spec"]
        selector = self.daemonset()["spec"]["selector"]["matchLabels"]
        self.assertEqual(spec["podSelector"]["matchLabels"], selector)
        self.assertIn("Ingress", spec["policyTypes"])
        grpc = self.container_port("grpc")
        metrics = self.container_port("metrics")
        peer_rules = 0
        for rule in spec["ingress"]:
            self.assertTrue(rule.get("from"), f"open to everyone: {rule}")
            self.assertTrue(rule.get("ports"), f"every port: {rule}")
            for peer in rule["from"]:
                self.assertNotIn("ipBlock", peer, rule)
            for port in rule["ports"]:
                low = port["port"]
                high = port.get("endPort", low)
                self.assertIsInstance(low, int, "numbered ports only")
                if low <= metrics <= high:
                    for peer in rule["from"]:
                        self.assertEqual(set(peer), {"namespaceSelector"},
                                         "metrics: the monitoring namespace")
                        self.assertTrue(peer["namespaceSelector"])
                if (low, high) not in ((grpc, grpc), (metrics, metrics)):
                    # A peer port: summond pods only, this namespace only.
                    peer_rules += 1
                    self.assertEqual(
                        rule["from"], [{"podSelector": {"matchLabels": selector}}],
                        f"peer ports {low}-{high} open beyond summond pods")
        self.assertGreater(peer_rules, 0, "no rule for the peer ports")


def raw_objects():
    objects = []
    for path in manifest_files(BASE):
        objects += load_yaml(path)
    return objects


class BaseManifests(Invariants, unittest.TestCase):
    """deploy/base, file by file, plus the layout and the comments."""

    @classmethod
    def setUpClass(cls):
        cls.objects = raw_objects()

    def test_every_manifest_parses_with_kind_and_name(self):
        files = (manifest_files(BASE) + manifest_files(GPU) +
                 manifest_files(ETCD))
        self.assertGreaterEqual(len(files), 12)
        for path in files:
            for doc in load_yaml(path):
                self.assertTrue(doc.get("apiVersion"), path)
                self.assertTrue(doc.get("kind"), path)
                self.assertTrue(doc.get("metadata", {}).get("name"), path)

    def test_no_latest_tag_anywhere(self):
        for directory in (BASE, GPU, ETCD):
            for name in os.listdir(directory):
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    self.assertNotIn(":latest", f.read(), name)

    def test_host_ipc_and_host_network_explained(self):
        with open(os.path.join(BASE, "daemonset.yaml"), encoding="utf-8") as f:
            text = f.read()
        for field in ("hostIPC: true", "hostNetwork: true"):
            (line,) = [l for l in text.splitlines() if field in l]
            self.assertIn("#", line, f"{field} without a comment saying why")

    def test_base_kustomization_lists_every_manifest(self):
        resources = kustomization(BASE)["resources"]
        self.assertEqual(len(resources), len(set(resources)))
        self.assertEqual(sorted(os.path.join(BASE, r) for r in resources),
                         manifest_files(BASE))


class GpuOverlay(Invariants, unittest.TestCase):
    """deploy/overlays/gpu: the base with its patch merged."""

    @classmethod
    def setUpClass(cls):
        cls.objects = build(GPU)

    def test_overlay_references_the_base(self):
        resources = kustomization(GPU)["resources"]
        self.assertIn(os.path.realpath(BASE),
                      [os.path.realpath(os.path.join(GPU, r))
                       for r in resources])
        for patch in kustomization(GPU).get("patches", []):
            self.assertTrue(os.path.isfile(os.path.join(GPU, patch["path"])))

    def test_overlay_keeps_every_base_object(self):
        self.assertEqual(sorted((o["kind"], o["metadata"]["name"])
                                for o in self.objects),
                         sorted((o["kind"], o["metadata"]["name"])
                                for o in raw_objects()))

    def test_gpu_nodes_and_cuda(self):
        pod = self.pod()
        self.assertTrue(any(k.startswith("nvidia.com/gpu")
                            for k in pod["nodeSelector"]))
        base_pod = only(raw_objects(), "DaemonSet")["spec"]["template"]["spec"]
        for key, value in base_pod["nodeSelector"].items():
            self.assertEqual(pod["nodeSelector"].get(key), value)
        keys = [t.get("key") for t in pod["tolerations"]]
        self.assertIn("nvidia.com/gpu", keys)
        for t in base_pod["tolerations"]:  # the patch replaces the list
            self.assertIn(t, pod["tolerations"])
        args = self.summond().get("args", [])
        self.assertIn(["--device", "cuda"],
                      [args[i:i + 2] for i in range(len(args))])
        self.assertIn("NODE_NAME", [e["name"] for e in self.summond()["env"]])


class EtcdOverlayInvariants(Invariants, unittest.TestCase):
    """deploy/overlays/etcd: the daemons' invariants hold with etcd added
    (its own objects are checked in etcd_manifests.EtcdOverlay)."""

    @classmethod
    def setUpClass(cls):
        cls.objects = build(ETCD)


class EtcdTlsOverlayInvariants(Invariants, unittest.TestCase):
    """deploy/overlays/etcd-tls: the daemons' invariants hold there too."""

    @classmethod
    def setUpClass(cls):
        cls.objects = build(ETCD_TLS)


class EtcdAuthOverlayInvariants(Invariants, unittest.TestCase):
    """deploy/overlays/etcd-auth: the daemons' invariants hold there too
    (its Job in etcd_auth_manifests.EtcdAuthOverlay)."""

    @classmethod
    def setUpClass(cls):
        cls.objects = build(ETCD_AUTH)


class Kubectl(unittest.TestCase):
    """`kubectl kustomize` renders what this test checks (where installed)."""

    def assertRendersAs(self, directory, objects):
        rendered = kubectl_build(directory)
        key = lambda o: (o["kind"], o["metadata"]["name"])
        self.assertEqual([normalized(o) for o in sorted(rendered, key=key)],
                         [normalized(o) for o in sorted(objects, key=key)])

    def test_base_renders_as_its_files(self):
        self.assertRendersAs(BASE, raw_objects())

    def test_gpu_overlay_renders_as_the_merge_here(self):
        self.assertRendersAs(GPU, build(GPU))

    def test_etcd_overlay_renders_as_the_merge_here(self):
        self.assertRendersAs(ETCD, build(ETCD))

    def test_etcd_tls_overlay_renders_as_the_merge_here(self):
        self.assertRendersAs(ETCD_TLS, build(ETCD_TLS))

    def test_etcd_auth_overlay_renders_as_the_merge_here(self):
        self.assertRendersAs(ETCD_AUTH, build(ETCD_AUTH))


def operations_doc():
    """docs/operations.md of the source tree: beside this file's real path
    (Bazel's runfiles link to it), or beside DEPLOY. None when absent."""
    for root in (os.path.join(os.path.dirname(os.path.realpath(__file__)),
                              "..", ".."),
                 os.path.join(DEPLOY, "..")):
        path = os.path.join(root, "docs", "operations.md")
        if os.path.isfile(path):
            return path
    return None


class OperationsDoc(unittest.TestCase):
    """docs/operations.md's "Kubernetes" section quotes the manifests."""

    @classmethod
    def setUpClass(cls):
        path = operations_doc()
        if path is None:
            raise unittest.SkipTest("docs/operations.md not found")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        start = text.index("\n## Kubernetes\n")
        end = text.find("\n## ", start + 1)
        cls.section = text[start:end if end > 0 else len(text)]
        cls.objects = raw_objects()

    def assertQuoted(self, value):
        self.assertIn(str(value), self.section)

    def test_daemonset_values(self):
        ds = only(self.objects, "DaemonSet")
        pod = ds["spec"]["template"]["spec"]
        (c,) = [c for c in pod["containers"] if c["name"] == "summond"]
        self.assertQuoted(f"image `{c['image']}`")
        self.assertQuoted(f"`{pod['priorityClassName']}`")
        self.assertQuoted(f"terminationGracePeriodSeconds: "
                          f"{pod['terminationGracePeriodSeconds']}")
        self.assertQuoted("maxUnavailable: "
                          f"{ds['spec']['updateStrategy']['rollingUpdate']['maxUnavailable']}")
        self.assertQuoted(f"= {c['resources']['limits']['memory']} =")
        annotations = ds["metadata"]["annotations"]
        self.assertQuoted(f"{quantity(annotations['summon.io/shm-size']) / 2**30:g} GiB")
        budget = int(only(self.objects, "ConfigMap")["data"]["memory-budget"])
        self.assertQuoted(f"`--memory-budget` {budget / 2**30:g} GiB")
        for port in c["ports"]:
            self.assertQuoted(f"`{port['name']}` {port['containerPort']}")
        self.assertQuoted(f"runs as {pod['securityContext']['runAsUser']}:"
                          f"{pod['securityContext']['runAsGroup']}")

    def test_services_and_policy(self):
        for s in (o for o in self.objects if o["kind"] == "Service"):
            self.assertQuoted(f"`{s['metadata']['name']}`")
        for pdb in (o for o in build(ETCD) if o["kind"] == "PodDisruptionBudget"):
            self.assertQuoted(f"PodDisruptionBudget `{pdb['metadata']['name']}`")
        etcd = only(build(ETCD), "StatefulSet")
        self.assertQuoted(f"image `{etcd['spec']['template']['spec']['containers'][0]['image']}`")
        self.assertQuoted(f"podManagementPolicy: {etcd['spec']['podManagementPolicy']}")
        self.assertQuoted("internalTrafficPolicy: Local")
        self.assertQuoted("clusterIP: None")
        self.assertNotIn("headless Service for the peer addresses",
                         self.section)
        job = only(build(ETCD_AUTH), "Job")
        self.assertQuoted(f"Job `{job['metadata']['name']}`")
        self.assertQuoted(f"backoffLimit: {job['spec']['backoffLimit']}")
        self.assertQuoted("restartPolicy: "
                          f"{job['spec']['template']['spec']['restartPolicy']}")
        policy = only(self.objects, "NetworkPolicy")
        for rule in policy["spec"]["ingress"]:
            for port in rule["ports"]:
                if "endPort" in port:
                    self.assertQuoted(f"{port['port']}-{port['endPort']}")
                else:
                    self.assertQuoted(str(port["port"]))


def main():
    print(f"manifests_test: {DEPLOY}")
    suite = unittest.defaultTestLoader.loadTestsFromModule(
        sys.modules[__name__])
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2,
                                     resultclass=_Recorder)
    result = runner.run(suite)
    if os.environ.get("XML_OUTPUT_FILE"):
        write_junit(os.environ["XML_OUTPUT_FILE"], result.cases)
    bad = len(result.failures) + len(result.errors)
    print(f"manifests_test: {result.testsRun - bad - len(result.skipped)} "
          f"passed, {bad} failed, {len(result.skipped)} skipped")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
