#!/usr/bin/env python3
"""Vendors etcd's v3 API protos without their Go-only annotations.

etcd's rpc.proto, kv.proto and auth.proto import gogoproto/gogo.proto (Go
code generation options) and google/api/annotations.proto (the REST gateway).
Neither changes a message or a method on the wire, and neither file exists
in Debian's protobuf, so this script removes the imports, the
`option (gogoproto.*)` lines, `[(gogoproto.*) = ...]` field options and the
`option (google.api.http) = { ... };` blocks (braces nest), and nothing else.

    strip_protos.py ETCD_CHECKOUT OUT_DIR

writes OUT_DIR/etcd/{etcdserver/etcdserverpb/rpc,mvcc/mvccpb/kv,
auth/authpb/auth}.proto, keeping etcd's own import paths ("etcd/..."), so
OUT_DIR is the proto root.
"""

import re
import sys
from pathlib import Path

FILES = [
    "etcdserver/etcdserverpb/rpc.proto",
    "mvcc/mvccpb/kv.proto",
    "auth/authpb/auth.proto",
]


def _drop_http_options(text):
    """Removes every `option (google.api.http) = { ... };` block."""
    out = []
    pos = 0
    pattern = re.compile(r"[ \t]*option \(google\.api\.http\) = \{")
    while True:
        match = pattern.search(text, pos)
        if not match:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:match.start()])
        depth = 0
        i = match.end() - 1
        while True:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        end = text.index(";", i) + 1
        if end < len(text) and text[end] == "\n":
            end += 1
        pos = end


def strip(text):
    text = _drop_http_options(text)
    lines = []
    for line in text.splitlines():
        if re.match(r'\s*import "(gogoproto/gogo|google/api/annotations)\.proto";',
                    line):
            continue
        if re.match(r"\s*option \(gogoproto\.[a-z_]+\) = \w+;", line):
            continue
        if line.strip() == "// for grpc-gateway":
            continue
        lines.append(re.sub(r"\s*\[\(gogoproto\.[^\]]*\]", "", line))
    # Removed blocks leave blank runs behind: keep at most one blank line.
    stripped = re.sub(r"\n{3,}", "\n\n", "\n".join(lines) + "\n")
    if "gogoproto" in stripped or "google.api" in stripped:
        raise SystemExit("an annotation survived stripping")
    return stripped


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    checkout, out = Path(sys.argv[1]), Path(sys.argv[2])
    for name in FILES:
        target = out / "etcd" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(strip((checkout / name).read_text()))


if __name__ == "__main__":
    main()
