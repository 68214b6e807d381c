"""SummonError: the one exception every summon call raises.

It sits below every other module of the package (client, session, mapping,
torch), so none of them has to import another just to raise it.
"""

from __future__ import annotations

import grpc


class SummonError(Exception):
    """A failed summon call: `code` is the gRPC status name ("FAILED_PRECONDITION"),
    `message` the daemon's explanation."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> "SummonError":
        code = error.code() if hasattr(error, "code") else None
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code.name if code is not None else "UNKNOWN", details or "")
