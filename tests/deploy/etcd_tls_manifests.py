"""Checks of deploy/overlays/etcd-tls, for manifests_test.py: the members of
deploy/overlays/etcd with client and peer TLS and client certificates
required, health on a plaintext metrics port, and a real etcd started with
exactly the overlay's flags (hosts and ports moved to this machine) that
refuses a client without a certificate and serves one with it.
manifests_test.py sets EtcdTlsOverlay.directory, .plaintext and .pki."""

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.request

from etcd_manifests import flags
from kustomize_build import build, only

TLS_DIR = "/etc/etcd/tls"
METRICS_PORT = 2381


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdTlsOverlay(unittest.TestCase):
    directory = None  # deploy/overlays/etcd-tls
    plaintext = None  # deploy/overlays/etcd
    pki = None        # tests/security/make_pki.sh

    @classmethod
    def setUpClass(cls):
        cls.objects = build(cls.directory)
        cls.sts = only(cls.objects, "StatefulSet")
        (cls.etcd,) = cls.sts["spec"]["template"]["spec"]["containers"]
        cls.flags = flags(cls.etcd["args"])

    def test_same_objects_as_the_plaintext_overlay(self):
        key = lambda o: (o["kind"], o["metadata"]["name"])
        self.assertEqual(sorted(map(key, self.objects)),
                         sorted(map(key, build(self.plaintext))))

    def test_only_tls_flags_change(self):
        (plain,) = only(build(self.plaintext), "StatefulSet")["spec"][
            "template"]["spec"]["containers"]
        before = flags(plain["args"])
        for name, value in before.items():
            self.assertEqual(self.flags[name],
                             value.replace("http://", "https://"), name)
        added = {k: v for k, v in self.flags.items() if k not in before}
        self.assertEqual(added, {
            "--cert-file": f"{TLS_DIR}/tls.crt",
            "--key-file": f"{TLS_DIR}/tls.key",
            "--trusted-ca-file": f"{TLS_DIR}/ca.crt",
            "--client-cert-auth": "",
            "--peer-cert-file": f"{TLS_DIR}/tls.crt",
            "--peer-key-file": f"{TLS_DIR}/tls.key",
            "--peer-trusted-ca-file": f"{TLS_DIR}/ca.crt",
            "--peer-client-cert-auth": "",
            "--listen-metrics-urls": f"http://0.0.0.0:{METRICS_PORT}",
        })

    def test_certificates_come_from_the_server_secret(self):
        pod = self.sts["spec"]["template"]["spec"]
        (mount,) = [m for m in self.etcd["volumeMounts"]
                    if m["mountPath"] == TLS_DIR]
        self.assertIs(mount["readOnly"], True)
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        self.assertEqual(volume["secret"]["secretName"], "summon-etcd-server")
        self.assertNotIn("optional", volume["secret"],
                         "a member without its certificate must not start")

    def test_probes_use_the_plaintext_metrics_port(self):
        ports = {p["name"]: p["containerPort"] for p in self.etcd["ports"]}
        self.assertEqual(ports["metrics"], METRICS_PORT)
        self.assertEqual(self.etcd["readinessProbe"]["httpGet"],
                         {"path": "/health", "port": "metrics"})
        self.assertEqual(self.etcd["livenessProbe"]["tcpSocket"],
                         {"port": "client"})

    def member_args(self, work, pki, client, peer, metrics):
        """The overlay's flags for one member on this machine: the member
        names become 127.0.0.1 with free ports, the secret's files make_pki's
        (its server certificate is valid for 127.0.0.1)."""
        host = "$(POD_NAME).summon-etcd.summon.svc"
        args = []
        for arg in self.etcd["args"]:
            arg = (arg.replace("$(POD_NAME)", "summon-etcd-0", 1)
                   if arg.startswith("--name=") else arg)
            if arg.startswith("--initial-cluster="):
                arg = f"--initial-cluster=summon-etcd-0=https://127.0.0.1:{peer}"
            arg = (arg.replace(host, "127.0.0.1").replace("0.0.0.0", "127.0.0.1")
                   .replace(":2379", f":{client}").replace(":2380", f":{peer}")
                   .replace(f":{METRICS_PORT}", f":{metrics}")
                   .replace("/var/lib/etcd", work)
                   .replace(f"{TLS_DIR}/tls.", f"{pki}/server.")
                   .replace(f"{TLS_DIR}/ca.crt", f"{pki}/ca.crt"))
            args.append(arg)
        return args

    def test_a_member_started_with_these_flags_requires_client_certificates(self):
        etcd = shutil.which("etcd")
        if etcd is None:
            raise unittest.SkipTest("etcd is not installed (Debian etcd-server)")
        with tempfile.TemporaryDirectory() as work:
            pki = os.path.join(work, "pki")
            subprocess.run(["bash", self.pki, pki], check=True)
            client, peer, metrics = free_port(), free_port(), free_port()
            args = self.member_args(work, pki, client, peer, metrics)
            with open(os.path.join(work, "etcd.log"), "w") as log:
                member = subprocess.Popen([etcd] + args, stdout=log, stderr=log)
            try:
                self.check_member(pki, client, metrics, member)
            finally:
                member.terminate()
                member.wait(timeout=20)

    def check_member(self, pki, client, metrics, member):
        # The kubelet's probe: plaintext, no certificate.
        health = None
        give_up = time.monotonic() + 30
        while health is None and time.monotonic() < give_up:
            self.assertIsNone(member.poll(), "etcd exited")
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{metrics}/health", timeout=2) as r:
                    health = (r.status, r.read())
            except OSError:
                time.sleep(0.2)
        self.assertEqual(health[0], 200)
        self.assertIn(b'"health":"true"', health[1])
        url = f"https://127.0.0.1:{client}/health"
        # The client port: TLS, and a certificate signed by the CA required.
        anonymous = ssl.create_default_context(cafile=f"{pki}/ca.crt")
        with self.assertRaises(OSError):
            urllib.request.urlopen(url, timeout=5, context=anonymous).read()
        rogue = ssl.create_default_context(cafile=f"{pki}/ca.crt")
        rogue.load_cert_chain(f"{pki}/mallory.crt", f"{pki}/mallory.key")
        with self.assertRaises(OSError):
            urllib.request.urlopen(url, timeout=5, context=rogue).read()
        summond = ssl.create_default_context(cafile=f"{pki}/ca.crt")
        summond.load_cert_chain(f"{pki}/alice.crt", f"{pki}/alice.key")
        with urllib.request.urlopen(url, timeout=5, context=summond) as r:
            self.assertEqual(r.status, 200)
            self.assertIn(b'"health":"true"', r.read())
        # Plain HTTP on the client port is not served.
        with self.assertRaises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{client}/health",
                                   timeout=5).read()
