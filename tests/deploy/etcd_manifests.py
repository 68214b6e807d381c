"""Checks of deploy/overlays/etcd's own objects, for manifests_test.py: a
3-member etcd StatefulSet whose members find each other by the headless
Service's names, the ConfigMap's coordinator naming exactly those members,
the disruption budgets, and the same security conventions as the daemons.
manifests_test.py sets EtcdOverlay.directory and EtcdOverlay.base."""

import re
import unittest

from kustomize_build import build, matches, only

MEMBERS = 3
PEER_PORT = 2380
CLIENT_PORT = 2379
# The etcd summon's tests, demo and CI run (Debian's etcd-server 3.4.23).
IMAGE = "gcr.io/etcd-development/etcd:v3.4.23"


def flags(args):
    """--key=value arguments as a dict (each key once)."""
    out = {}
    for arg in args:
        key, _, value = arg.partition("=")
        if key in out:
            raise AssertionError(f"{key} given twice")
        out[key] = value
    return out


class EtcdOverlay(unittest.TestCase):
    directory = None  # deploy/overlays/etcd
    base = None       # deploy/base

    @classmethod
    def setUpClass(cls):
        cls.objects = build(cls.directory)
        cls.sts = only(cls.objects, "StatefulSet")
        cls.pod = cls.sts["spec"]["template"]["spec"]
        (cls.etcd,) = cls.pod["containers"]
        cls.namespace = cls.sts["metadata"]["namespace"]

    def object(self, kind, name):
        (o,) = [o for o in self.objects if o["kind"] == kind and
                o["metadata"]["name"] == name]
        return o

    def member_host(self, i):
        service = self.sts["spec"]["serviceName"]
        return f"summon-etcd-{i}.{service}.{self.namespace}.svc"

    def test_adds_exactly_etcd_to_the_base(self):
        key = lambda o: (o["kind"], o["metadata"]["name"])
        added = sorted(set(map(key, self.objects)) -
                       set(map(key, build(self.base))))
        self.assertEqual(added, [("PodDisruptionBudget", "summon-etcd"),
                                 ("Service", "summon-etcd"),
                                 ("StatefulSet", "summon-etcd")])
        self.assertEqual(len(self.objects), len(build(self.base)) + 3)

    def test_three_members_started_together(self):
        spec = self.sts["spec"]
        self.assertEqual(spec["replicas"], MEMBERS)
        self.assertEqual(spec["podManagementPolicy"], "Parallel",
                         "OrderedReady waits for a member that cannot be "
                         "ready without the others")
        self.assertEqual(spec["updateStrategy"], {"type": "RollingUpdate"})
        selector = spec["selector"]["matchLabels"]
        labels = spec["template"]["metadata"]["labels"]
        self.assertTrue(matches(selector, labels))
        self.assertEqual(selector["app.kubernetes.io/component"], "etcd")
        self.assertNotIn("app.kubernetes.io/version", selector)
        daemons = only(self.objects, "DaemonSet")["spec"]
        self.assertFalse(matches(daemons["selector"]["matchLabels"], labels))
        self.assertFalse(matches(selector,
                                 daemons["template"]["metadata"]["labels"]))

    def test_headless_service_names_the_members(self):
        service = self.object("Service", self.sts["spec"]["serviceName"])
        spec = service["spec"]
        self.assertEqual(spec["clusterIP"], "None")
        self.assertIs(spec["publishNotReadyAddresses"], True,
                      "members find each other before they have a quorum")
        self.assertEqual(spec["selector"],
                         self.sts["spec"]["selector"]["matchLabels"])
        ports = {p["name"]: p["containerPort"] for p in self.etcd["ports"]}
        self.assertEqual(ports, {"client": CLIENT_PORT, "peer": PEER_PORT})
        self.assertEqual(
            sorted((p["name"], p["port"], p["targetPort"]) for p in spec["ports"]),
            [("client", CLIENT_PORT, "client"), ("peer", PEER_PORT, "peer")])

    def test_member_flags(self):
        self.assertEqual(self.etcd["image"], IMAGE)
        self.assertEqual(self.etcd["command"], ["/usr/local/bin/etcd"])
        self.assertEqual(self.etcd["env"], [{
            "name": "POD_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
        f = flags(self.etcd["args"])
        me = f"$(POD_NAME).{self.sts['spec']['serviceName']}.{self.namespace}.svc"
        self.assertEqual(f["--name"], "$(POD_NAME)")
        self.assertEqual(f["--advertise-client-urls"], f"http://{me}:{CLIENT_PORT}")
        self.assertEqual(f["--initial-advertise-peer-urls"],
                         f"http://{me}:{PEER_PORT}")
        self.assertEqual(f["--listen-client-urls"], f"http://0.0.0.0:{CLIENT_PORT}")
        self.assertEqual(f["--listen-peer-urls"], f"http://0.0.0.0:{PEER_PORT}")
        self.assertEqual(f["--initial-cluster"], ",".join(
            f"summon-etcd-{i}=http://{self.member_host(i)}:{PEER_PORT}"
            for i in range(MEMBERS)))
        self.assertEqual(f["--initial-cluster-state"], "new")
        # The data dir lives on the member's own volume.
        (claim,) = self.sts["spec"]["volumeClaimTemplates"]
        (mount,) = self.etcd["volumeMounts"]
        self.assertEqual(mount["name"], claim["metadata"]["name"])
        self.assertTrue(f["--data-dir"].startswith(mount["mountPath"] + "/"),
                        f["--data-dir"])
        self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteOnce"])
        self.assertIn("storage", claim["spec"]["resources"]["requests"])

    def test_coordinator_names_every_member(self):
        config = only(self.objects, "ConfigMap")["data"]
        self.assertEqual(config["coordinator"], "etcd://" + ",".join(
            f"{self.member_host(i)}:{CLIENT_PORT}" for i in range(MEMBERS)) +
            "/summon")
        ttl = re.fullmatch(r"([0-9]+)s", config["coordinator-lease-ttl"])
        self.assertTrue(ttl, config["coordinator-lease-ttl"])
        self.assertGreaterEqual(int(ttl.group(1)), 2, "etcd's shortest lease")
        self.assertNotIn("coordinator", only(build(self.base), "ConfigMap")["data"],
                         "the base stays static")

    def test_disruption_budget_keeps_the_quorum(self):
        pdb = self.object("PodDisruptionBudget", "summon-etcd")
        self.assertEqual(pdb["apiVersion"], "policy/v1")
        self.assertEqual(pdb["spec"], {
            "maxUnavailable": 1,
            "selector": {"matchLabels": self.sts["spec"]["selector"]["matchLabels"]}})
        self.assertGreaterEqual(MEMBERS - 1, MEMBERS // 2 + 1)

    def test_one_member_per_node(self):
        (term,) = self.pod["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        self.assertEqual(term["topologyKey"], "kubernetes.io/hostname")
        self.assertEqual(term["labelSelector"]["matchLabels"],
                         self.sts["spec"]["selector"]["matchLabels"])

    def test_security_and_resources(self):
        pod = self.pod
        self.assertIs(pod["automountServiceAccountToken"], False)
        self.assertNotIn("hostNetwork", pod)
        sc = pod["securityContext"]
        self.assertIs(sc["runAsNonRoot"], True)
        self.assertGreater(sc["runAsUser"], 0)
        self.assertEqual(sc["fsGroup"], sc["runAsGroup"])
        self.assertEqual(sc["seccompProfile"], {"type": "RuntimeDefault"})
        self.assertEqual(self.etcd["securityContext"], {
            "runAsNonRoot": True, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}})
        resources = self.etcd["resources"]
        for kind in ("requests", "limits"):
            self.assertEqual(set(resources[kind]), {"cpu", "memory"}, kind)
        self.assertEqual(resources["requests"]["memory"],
                         resources["limits"]["memory"])

    def test_probes(self):
        self.assertEqual(self.etcd["readinessProbe"]["httpGet"],
                         {"path": "/health", "port": "client"})
        # A member without quorum answers /health with 503: liveness must not
        # restart it for that.
        self.assertEqual(self.etcd["livenessProbe"]["tcpSocket"],
                         {"port": "client"})
        self.assertNotIn("httpGet", self.etcd["livenessProbe"])
