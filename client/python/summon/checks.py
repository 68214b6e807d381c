"""Checks made before anything is sent, the same as summonctl's: a server
address must name its port, and a model name must follow the daemon's rule
(server/shard_store.h, ValidateModelName)."""

from __future__ import annotations

import re

from summon.errors import SummonError

MAX_MODEL_NAME_BYTES = 128
_MODEL_NAME = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_MODEL_NAME_BYTES)
_SCHEMES = ("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:")


def check_address(address: str, source: str = "address") -> None:
    """INVALID_ARGUMENT for "127.0.0.1" and the like, which gRPC would dial
    at a port of its choosing; a target with a scheme is gRPC's to judge."""
    if address.startswith(_SCHEMES):
        return
    host, colon, port = address.rpartition(":")
    bare_ipv6 = ":" in host and not host.startswith("[")
    if (not colon or not host or bare_ipv6 or not port.isdigit()
            or not 0 < int(port) < 65536):
        raise SummonError("INVALID_ARGUMENT",
                          f"{source} '{address}' names no port: write HOST:PORT "
                          "(127.0.0.1:7070, [::1]:7070) or unix:PATH")


def check_model_name(name: str) -> None:
    """INVALID_ARGUMENT unless `name` is 1 to 128 of A-Z a-z 0-9 . _ - and not
    "." or ".." (model names end up in shared-memory segment names)."""
    if not _MODEL_NAME.fullmatch(name) or name in (".", ".."):
        raise SummonError("INVALID_ARGUMENT",
                          f"model name '{name}': use 1 to {MAX_MODEL_NAME_BYTES} of "
                          "A-Z a-z 0-9 . _ - (not '.' or '..')")
