"""summon's gRPC stubs, generated from proto/ at build time and never committed.

`protoc -I proto --python_out --grpc_python_out` writes `summon/v1/*_pb2.py`
and `*_pb2_grpc.py` next to this package (their imports name `summon.v1`, so
they live inside it; the directory is git-ignored). A stamp holding a hash of
the .proto files makes a stale copy regenerate on the next import, so the
Python and C++ clients never drift from the proto. Debian's
`python3-grpc-tools` is too old for proto3 `optional`; the system `protoc`
with `grpc_python_plugin` (protobuf-compiler-grpc) matches the system
`python3-protobuf`.

    python3 -m summon._stubs          # generate (scripts/test does)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROTO_FILES = ("types", "summon", "trainer", "peer")
_PACKAGE_DIR = Path(__file__).resolve().parent
_GENERATED_DIR = _PACKAGE_DIR / "v1"
_STAMP = _GENERATED_DIR / "STAMP"


def proto_root() -> Path:
    """The directory holding summon/v1/*.proto ($SUMMON_PROTO_DIR or the repo's proto/)."""
    override = os.environ.get("SUMMON_PROTO_DIR")
    if override:
        return Path(override)
    return _PACKAGE_DIR.parents[2] / "proto"


def _proto_paths(root: Path) -> list[Path]:
    return [root / "summon" / "v1" / f"{name}.proto" for name in PROTO_FILES]


def _fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for path in _proto_paths(root):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _generate(root: Path, fingerprint: str) -> None:
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if protoc is None or plugin is None:
        raise RuntimeError(
            "summon needs protoc and grpc_python_plugin to generate its stubs "
            "(Debian: protobuf-compiler protobuf-compiler-grpc; scripts/setup "
            "installs them)")
    with tempfile.TemporaryDirectory(dir=_PACKAGE_DIR) as out:
        command = [
            protoc, f"-I{root}", f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--plugin=protoc-gen-grpc_python={plugin}",
            *[str(path) for path in _proto_paths(root)],
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"protoc failed ({result.returncode}): {result.stderr.strip()}")
        fresh = Path(out) / "summon" / "v1"
        (fresh / "__init__.py").write_text(
            '"""Generated from proto/summon/v1 by summon._stubs; do not edit."""\n')
        (fresh / "STAMP").write_text(fingerprint + "\n")
        if _GENERATED_DIR.exists():
            shutil.rmtree(_GENERATED_DIR)
        os.replace(fresh, _GENERATED_DIR)


def ensure_stubs(force: bool = False) -> Path:
    """Generates the stubs unless an up-to-date copy exists; returns their directory.

    Without the .proto files (an installed copy) existing stubs are used as
    they are. Concurrent processes serialise on a lock file.
    """
    root = proto_root()
    if not all(path.is_file() for path in _proto_paths(root)):
        if _STAMP.is_file():
            return _GENERATED_DIR
        raise RuntimeError(
            f"summon's stubs are not generated and no protos are at {root} "
            "(set SUMMON_PROTO_DIR)")
    fingerprint = _fingerprint(root)
    with open(_PACKAGE_DIR / ".stubs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = _STAMP.read_text().strip() if _STAMP.is_file() else ""
        if force or current != fingerprint:
            _generate(root, fingerprint)
    return _GENERATED_DIR


def main() -> int:
    path = ensure_stubs(force="--force" in sys.argv[1:])
    print(f"summon stubs in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
