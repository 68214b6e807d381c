"""What the multi-process tests share: a free loopback port, and waiting for
a condition with a deadline (the tests that start daemons, clusters and etcd
themselves)."""

from __future__ import annotations

import socket
import time
from typing import Any, Callable


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """check() every 0.1 s until it returns something truthy, which is
    returned; fails the test naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
