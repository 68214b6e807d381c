"""Checks of deploy/overlays/etcd-auth, for manifests_test.py: deploy/overlays/
etcd-tls plus the Job summon-etcd-auth (its exact shape), the ConfigMap that
holds etcd-auth-setup.sh byte for byte, and the ConfigMap key
coordinator-user; then the very script, run as the Job runs it (its command
and environment, the mount paths moved to files here), twice, against a real
etcd started with the TLS overlay's flags, and etcdctl (Debian's
etcd-client) checking what it left: authentication on, summon's user
reading and writing /summon/<cluster>/ and refused elsewhere, a client
without a password refused. manifests_test.py sets EtcdAuthOverlay.directory,
.tls and .pki."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from etcd_tls_manifests import EtcdTlsOverlay, free_port
from kustomize_build import build, only

SCRIPT = "etcd-auth-setup.sh"
LABELS = {
    "app.kubernetes.io/name": "summon",
    "app.kubernetes.io/instance": "summon",
    "app.kubernetes.io/component": "etcd-auth",
    "app.kubernetes.io/part-of": "summon",
    "app.kubernetes.io/version": "0.1.0",
    "app.kubernetes.io/managed-by": "kustomize",
}
ROOT_PASSWORD = "r00t-Secret"
SUMMON_PASSWORD = "summon-Secret"


def named(objects: list[dict], kind: str, name: str) -> dict:
    (o,) = [o for o in objects
            if o["kind"] == kind and o["metadata"]["name"] == name]
    return o


# What every run that creates summon's user prints last.
CONVERGED_TAIL = [
    "Role summon is granted to user summon",
    "Authentication Enabled",
    "etcd-auth-setup: authentication on; user summon reads and "
    "writes /summon/summon/ only"]


class EtcdAuthOverlay(unittest.TestCase):
    directory = None  # deploy/overlays/etcd-auth
    tls = None        # deploy/overlays/etcd-tls
    pki = None        # tests/security/make_pki.sh

    @classmethod
    def setUpClass(cls):
        cls.objects = build(cls.directory)
        cls.job = named(cls.objects, "Job", "summon-etcd-auth")
        cls.pod = cls.job["spec"]["template"]["spec"]
        (cls.container,) = cls.pod["containers"]
        (cls.etcd,) = only(cls.objects, "StatefulSet")["spec"]["template"][
            "spec"]["containers"]
        cls.config = named(cls.objects, "ConfigMap", "summon")["data"]

    # The manifests.

    def test_adds_the_job_its_script_and_the_user(self):
        key = lambda o: (o["kind"], o["metadata"]["name"])
        before = build(self.tls)
        self.assertEqual(sorted(set(map(key, self.objects)) -
                                set(map(key, before))),
                         [("ConfigMap", "summon-etcd-auth"),
                          ("Job", "summon-etcd-auth")])
        self.assertEqual(len(self.objects), len(before) + 2)
        tls_config = named(before, "ConfigMap", "summon")
        self.assertEqual(self.config, {**tls_config["data"],
                                       "coordinator-user": "summon"})
        for o in before:  # nothing else changes
            mine = named(self.objects, o["kind"], o["metadata"]["name"])
            if o is tls_config:
                mine = {**mine, "data": tls_config["data"]}
            self.assertEqual(mine, o)

    def test_script_config_map_holds_the_file(self):
        cm = named(self.objects, "ConfigMap", "summon-etcd-auth")
        with open(os.path.join(self.directory, SCRIPT), encoding="utf-8") as f:
            self.assertEqual(cm["data"], {SCRIPT: f.read()})
        self.assertEqual(cm["metadata"], {"name": "summon-etcd-auth",
                                          "namespace": "summon",
                                          "labels": LABELS})

    def test_job_shape(self):
        self.assertEqual(self.job["apiVersion"], "batch/v1")
        self.assertEqual(self.job["metadata"]["labels"], LABELS)
        self.assertEqual(self.job["spec"]["backoffLimit"], 6)
        self.assertEqual(set(self.job["spec"]), {"backoffLimit", "template"},
                         "no ttlSecondsAfterFinished: the finished Job stays, "
                         "so applying again does not rerun it unasked")
        self.assertEqual(self.job["spec"]["template"]["metadata"]["labels"],
                         LABELS)
        pod = self.pod
        self.assertEqual(pod["restartPolicy"], "Never")
        self.assertIs(pod["automountServiceAccountToken"], False)
        self.assertIs(pod["enableServiceLinks"], False)
        self.assertEqual(pod["securityContext"], {
            "runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
            "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}})
        c = self.container
        self.assertEqual(c["name"], "etcdctl")
        self.assertEqual(c["image"], self.etcd["image"],
                         "etcdctl of the members' own release")
        self.assertEqual(c["command"],
                         ["/bin/sh", f"/etc/summon-etcd-auth/{SCRIPT}"])
        self.assertNotIn("args", c)
        self.assertEqual(c["env"], [
            {"name": "SUMMON_COORDINATOR", "valueFrom": {"configMapKeyRef": {
                "name": "summon", "key": "coordinator"}}},
            {"name": "SUMMON_USER", "valueFrom": {"configMapKeyRef": {
                "name": "summon", "key": "coordinator-user"}}},
            {"name": "ROOT_PASSWORD_FILE",
             "value": "/etc/summon-etcd-root/password"},
            {"name": "SUMMON_PASSWORD_FILE",
             "value": "/etc/summon-etcd/password"},
            {"name": "ETCDCTL_CACERT", "value": "/etc/summon-etcd/ca.crt"},
            {"name": "ETCDCTL_CERT", "value": "/etc/summon-etcd/tls.crt"},
            {"name": "ETCDCTL_KEY", "value": "/etc/summon-etcd/tls.key"}])
        self.assertEqual(c["volumeMounts"], [
            {"name": "script", "mountPath": "/etc/summon-etcd-auth",
             "readOnly": True},
            {"name": "etcd-client", "mountPath": "/etc/summon-etcd",
             "readOnly": True},
            {"name": "etcd-root", "mountPath": "/etc/summon-etcd-root",
             "readOnly": True}])
        self.assertEqual(pod["volumes"], [
            {"name": "script", "configMap": {"name": "summon-etcd-auth"}},
            {"name": "etcd-client", "secret": {
                "secretName": "summon-etcd-client", "defaultMode": 0o440}},
            {"name": "etcd-root", "secret": {
                "secretName": "summon-etcd-root", "defaultMode": 0o440}}])
        self.assertEqual(c["securityContext"], {
            "runAsNonRoot": True, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}})
        self.assertEqual(c["resources"], {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "64Mi"}})

    def test_summon_password_is_the_one_summond_reads(self):
        """The Job sets the password summond gets: the same secret, mounted
        at the same path as in the DaemonSet (deploy/entrypoint.sh reads
        /etc/summon-etcd/password)."""
        ds = only(self.objects, "DaemonSet")["spec"]["template"]["spec"]
        (summond,) = [c for c in ds["containers"] if c["name"] == "summond"]
        (mount,) = [m for m in summond["volumeMounts"]
                    if m["name"] == "etcd-client"]
        (volume,) = [v for v in ds["volumes"] if v["name"] == "etcd-client"]
        self.assertEqual(mount["mountPath"], "/etc/summon-etcd")
        self.assertEqual(volume["secret"]["secretName"], "summon-etcd-client")

    # The script against a real etcd.

    def local_env(self, work: str, pki: str, client: int) -> dict[str, str]:
        """The Job's environment on this machine: the ConfigMap's values,
        the coordinator's members replaced by the one started here, each
        secret's mount path a directory of make_pki's files."""
        cluster = self.config["coordinator"].rsplit("/", 1)[1]
        self.assertEqual(cluster, "summon")
        secrets = {"/etc/summon-etcd": os.path.join(work, "etcd-client"),
                   "/etc/summon-etcd-root": os.path.join(work, "etcd-root")}
        os.makedirs(secrets["/etc/summon-etcd"])
        os.makedirs(secrets["/etc/summon-etcd-root"])
        client_dir = secrets["/etc/summon-etcd"]
        shutil.copy(f"{pki}/ca.crt", f"{client_dir}/ca.crt")
        shutil.copy(f"{pki}/alice.crt", f"{client_dir}/tls.crt")
        shutil.copy(f"{pki}/alice.key", f"{client_dir}/tls.key")
        with open(f"{client_dir}/password", "w") as f:
            f.write(SUMMON_PASSWORD + "\n")
        with open(os.path.join(secrets["/etc/summon-etcd-root"], "password"),
                  "w") as f:
            f.write(ROOT_PASSWORD + "\n")
        env = {"PATH": "/usr/bin:/bin", "ETCD_WAIT_S": "30"}
        for item in self.container["env"]:
            if "valueFrom" in item:
                ref = item["valueFrom"]["configMapKeyRef"]
                value = self.config[ref["key"]]
            else:
                value = item["value"]
            for mount, local in secrets.items():
                if value.startswith(mount + "/"):
                    value = local + value[len(mount):]
            env[item["name"]] = value
        env["SUMMON_COORDINATOR"] = f"etcd://127.0.0.1:{client}/{cluster}"
        return env

    def command(self) -> list[str]:
        """The Job's command with the script this overlay's ConfigMap holds."""
        shell, path = self.container["command"]
        self.assertEqual(os.path.basename(path), SCRIPT)
        return [shell, os.path.join(self.directory, SCRIPT)]

    def start_etcd(self, work: str, pki: str) -> int:
        etcd = shutil.which("etcd")
        if etcd is None or shutil.which("etcdctl") is None:
            raise unittest.SkipTest("etcd or etcdctl is not installed "
                                    "(Debian etcd-server, etcd-client)")
        client, peer, metrics = free_port(), free_port(), free_port()
        args = EtcdTlsOverlay.member_args(self, os.path.join(work, "etcd"),
                                          pki, client, peer, metrics)
        with open(os.path.join(work, "etcd.log"), "w") as log:
            member = subprocess.Popen([etcd] + args, stdout=log, stderr=log)
        self.addCleanup(member.wait, timeout=20)
        self.addCleanup(member.terminate)
        return client

    def etcdctl(self, env: dict[str, str], *args: str,
                user: str | None = None) -> subprocess.CompletedProcess:
        env = self.etcdctl_env(env)
        if user:
            env["ETCDCTL_USER"] = user
        return subprocess.run(["etcdctl", "--dial-timeout=5s"] + list(args),
                              env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    def run_script(self, env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(), env=env, capture_output=True,
                              text=True, timeout=120, check=False)

    def wait_ready(self, env: dict[str, str]) -> None:
        give_up = time.monotonic() + 30
        while self.etcdctl(env, "endpoint", "health").returncode != 0:
            self.assertLess(time.monotonic(), give_up, "etcd not healthy")
            time.sleep(0.2)

    def start_configured_etcd(self) -> dict[str, str]:
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        pki = os.path.join(work, "pki")
        subprocess.run(["bash", self.pki, pki], check=True)
        client = self.start_etcd(work, pki)
        self.env = self.local_env(work, pki, client)
        self.wait_ready(self.env)
        return self.env

    def test_script_twice_against_a_real_etcd(self):
        env = self.start_configured_etcd()
        endpoint = env_endpoint(env)
        first = self.run_script(env)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertEqual(first.stdout.splitlines(), [
            f"etcd-auth-setup: {endpoint}, authentication on: false",
            "User root created",
            "Role root is granted to user root",
            "Role summon created",
            "Role summon updated",
            "User summon created",
            *CONVERGED_TAIL])
        # Again: nothing to do, nothing written (a write would outdate
        # summond's tokens).
        second = self.run_script(env)
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertEqual(second.stdout.splitlines(), [
            f"etcd-auth-setup: {endpoint}, authentication on: true",
            "etcd-auth-setup: authentication on; user summon reads and "
            "writes /summon/summon/ only"])
        self.check_end_state(env)

    def check_end_state(self, env: dict[str, str]) -> None:
        root = f"root:{ROOT_PASSWORD}"
        summon = f"summon:{SUMMON_PASSWORD}"
        def ok(*args: str, user: str | None = None) -> str:
            return self.assertOk(self.etcdctl(env, *args, user=user))

        self.assertEqual(ok("user", "list", user=root), "root\nsummon\n")
        self.assertEqual(ok("user", "get", "root", user=root),
                         "User: root\nRoles: root\n")
        self.assertEqual(ok("user", "get", "summon", user=root),
                         "User: summon\nRoles: summon\n")
        self.assertEqual(ok("role", "get", "summon", user=root),
                         "Role summon\nKV Read:\n"
                         "\t[/summon/summon/, /summon/summon0) "
                         "(prefix /summon/summon/)\nKV Write:\n"
                         "\t[/summon/summon/, /summon/summon0) "
                         "(prefix /summon/summon/)\n")
        # summon's user: its prefix, and nothing else.
        self.assertEqual(ok("put", "/summon/summon/k", "v", user=summon),
                         "OK\n")
        self.assertEqual(ok("get", "/summon/summon/k", user=summon),
                         "/summon/summon/k\nv\n")
        for args in (("put", "/summon/other/k", "v"), ("put", "/k", "v"),
                     ("get", "/summon/", "--prefix"), ("user", "list"),
                     ("auth", "disable")):
            self.assertRefused(self.etcdctl(env, *args, user=summon),
                               "etcdserver: permission denied")
        # Authentication is on: a client with a certificate (CN=alice, which
        # etcd takes as the user name: no such user) and no password is
        # refused, and so is a wrong password.
        self.assertRefused(self.etcdctl(env, "get", "/summon/summon/k"),
                           "etcdserver: permission denied")
        self.assertRefused(self.etcdctl(env, "get", "/summon/summon/k",
                                        user="summon:wrong"),
                           "etcdserver: authentication failed, invalid user "
                           "ID or password")

    def test_converges_after_a_partial_run(self):
        """A run that stopped half way (root made with another password,
        the role without its permission), and a password etcdctl cannot set:
        refused before anything changes."""
        env = self.start_configured_etcd()
        blank = dict(env)
        blank_dir = os.path.dirname(env["ROOT_PASSWORD_FILE"])
        with open(os.path.join(blank_dir, "blank"), "w") as f:
            f.write("two words\n")
        blank["ROOT_PASSWORD_FILE"] = os.path.join(blank_dir, "blank")
        refused = self.run_script(blank)
        self.assertEqual(refused.returncode, 2)
        self.assertEqual(refused.stderr,
                         f"etcd-auth-setup: {blank['ROOT_PASSWORD_FILE']}: "
                         "the password has a blank (etcdctl 3.4 cannot set "
                         "it)\n")
        self.assertEqual(self.assertOk(self.etcdctl(env, "user", "list")), "")
        add = subprocess.run(
            ["etcdctl", "user", "add", "root", "--interactive=false"],
            input="an-old-one\n", env=self.etcdctl_env(env),
            capture_output=True, text=True, check=True)
        self.assertEqual(add.stdout, "User root created\n")
        self.assertOk(self.etcdctl(env, "role", "add", "summon"))
        run = self.run_script(env)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.splitlines(), [
            f"etcd-auth-setup: {env_endpoint(env)}, authentication on: false",
            "Password updated",
            "Role root is granted to user root",
            "Role summon updated",
            "User summon created",
            *CONVERGED_TAIL])
        self.check_end_state(env)

    def etcdctl_env(self, env: dict[str, str]) -> dict[str, str]:
        out = {k: v for k, v in env.items() if k.startswith("ETCDCTL_")}
        out["ETCDCTL_ENDPOINTS"] = env_endpoint(env)
        return out

    def assertOk(self, run: subprocess.CompletedProcess) -> str:
        self.assertEqual(run.returncode, 0, run.stderr)
        return run.stdout

    def assertRefused(self, run: subprocess.CompletedProcess,
                      message: str) -> None:
        self.assertNotEqual(run.returncode, 0, run.stdout)
        self.assertEqual(run.stdout, "")
        self.assertEqual(run.stderr.splitlines()[-1], f"Error: {message}")


def env_endpoint(env: dict[str, str]) -> str:
    """The https:// endpoint the script derives from SUMMON_COORDINATOR."""
    host = env["SUMMON_COORDINATOR"][len("etcd://"):].rsplit("/", 1)[0]
    return f"https://{host}"
