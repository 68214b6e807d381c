"""A summond child process on this machine, for examples, tests and benchmarks.

    with LocalDaemon(local_ranks=2, data_dir=tmp) as daemon:
        client = summon.Client(daemon.address)

The daemon binds port 0 and reports its port through --port-file, so
concurrent daemons never clash; with `unix_socket` it also serves there, an
address that stays the same across `restart()`. The binary is $SUMMON_DAEMON,
else bazel-bin/server/summond of the repository. LinkProxy: a TCP link to a
daemon that can be cut (a black-holed network) and healed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[3]


def daemon_binary() -> str:
    return os.environ.get("SUMMON_DAEMON") or str(REPO_ROOT / "bazel-bin/server/summond")


def summonctl_binary() -> str:
    return os.environ.get("SUMMONCTL") or str(REPO_ROOT / "bazel-bin/client/summonctl")


class LocalDaemon:
    """One summond with `local_ranks` ranks and its shards in `data_dir`."""

    def __init__(self, local_ranks: int = 1, data_dir: Optional[str] = None,
                 unix_socket: Optional[str] = None, log_path: Optional[str] = None,
                 extra_args: Sequence[str] = (), binary: Optional[str] = None,
                 insecure_local: bool = True):
        self._owned_dir = None if data_dir else tempfile.TemporaryDirectory(prefix="summond-")
        self.data_dir = data_dir or self._owned_dir.name  # type: ignore[union-attr]
        self.local_ranks = local_ranks
        self.unix_socket = unix_socket
        self.log_path = log_path or os.path.join(self.data_dir, "summond.log")
        self.extra_args = list(extra_args)
        # False: `extra_args` must secure it (--tls-cert, --tls-key, ...).
        self.insecure_local = insecure_local
        self.binary = binary or daemon_binary()
        self.process: Optional[subprocess.Popen] = None
        self.port: Optional[int] = None

    @property
    def address(self) -> str:
        """The Unix socket when there is one (stable across restarts), else TCP."""
        if self.unix_socket:
            return "unix:" + self.unix_socket
        return self.tcp_address

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "LocalDaemon":
        port_file = os.path.join(self.data_dir, "summond.port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        command = [self.binary, *(["--insecure-local"] if self.insecure_local else []),
                   "--listen", "127.0.0.1:0", "--port-file", port_file,
                   "--local-ranks", str(self.local_ranks), "--data-dir", self.data_dir,
                   "--log-level", "warn", *self.extra_args]
        if self.unix_socket:
            command += ["--unix-socket", self.unix_socket]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"summond exited with {self.process.returncode}; "
                                   f"log: {self.log_path}\n{self.log()}")
            try:
                text = Path(port_file).read_text().strip()
            except FileNotFoundError:
                text = ""
            if text:
                self.port = int(text)
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"summond did not write {port_file} in {timeout} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> Optional[int]:
        """Stops the daemon (SIGTERM: gracefully); returns its exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        status = self.process.returncode
        self.process = None
        return status

    def restart(self, sig: int = signal.SIGTERM) -> "LocalDaemon":
        """Stops and starts again on the same data dir (the shards survive)."""
        self.stop(sig)
        return self.start()

    def log(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def delete_models(self) -> None:
        """Deletes every model, so that its shared-memory segments (which outlive
        a daemon that has a data dir) are freed."""
        from summon.client import Client, SummonError
        # An admin (summond --admins) sees every principal's sessions; anyone
        # else only their own, and another's open session keeps its model.
        with Client(self.address, timeout=10, principal=self._admin()) as client:
            # A model with open sessions cannot be deleted: abort them first.
            for session in client.list_sessions():
                try:
                    client.close_session(session.id, abort=True)
                except SummonError:
                    pass
            for model in client.list_models():
                try:
                    client.delete_model(model.name, force=True)
                except SummonError:
                    pass  # e.g. a rank left mid-step; its segments stay

    def _admin(self) -> Optional[str]:
        """The first principal of `--admins` among the daemon's flags, if any."""
        for flag, value in zip(self.extra_args, self.extra_args[1:]):
            if flag == "--admins":
                return value.split(",")[0]
        for flag in self.extra_args:
            if flag.startswith("--admins="):
                return flag.split("=", 1)[1].split(",")[0]
        return None

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                self.delete_models()
            except Exception:
                pass
        self.stop()
        if self._owned_dir is not None:
            self._owned_dir.cleanup()
            self._owned_dir = None

    def __enter__(self) -> "LocalDaemon":
        return self.start() if self.process is None else self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LinkProxy:
    """A TCP proxy on 127.0.0.1 to `port` whose link can be cut: while cut,
    bytes are held both ways (a black-holed network: nothing answers,
    nothing is refused) and delivered once it heals. Tests and examples
    put it between a client and summond, or between two cluster nodes."""

    def __init__(self, port: int):
        self._target = port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                far = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                near.close()  # the target is down: refused, as without a proxy
                continue
            self._sockets += [near, far]
            for source, sink in ((near, far), (far, near)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                self._open.wait()
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.set()
        self._server.close()
        for sock in self._sockets:
            sock.close()
