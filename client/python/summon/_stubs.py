"""summon's gRPC stubs, generated from proto/ and never committed.

grpcio-tools' protoc (`python -m grpc_tools.protoc`, no system protoc needed)
writes `summon/v1/*_pb2.py` and `*_pb2_grpc.py` (their imports name
`summon.v1`, so they live inside the package; in a checkout the directory is
git-ignored). Two callers:

- the package build (client/python/setup.py): `pip install ./client/python`
  and the wheel scripts/test builds carry stubs generated at build time;
- a checkout (editable install, or client/python on PYTHONPATH): on import,
  a stamp holding a hash of the .proto files makes a missing or stale copy
  regenerate, so the Python and C++ clients never drift from the proto.

    python -m summon._stubs [--force]     # generate now (scripts/test does)
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

PROTO_FILES = ("types", "status", "weight_sync", "summon", "trainer", "peer")
_PACKAGE_DIR = Path(__file__).resolve().parent
_GENERATED_DIR = _PACKAGE_DIR / "v1"
_STAMP = _GENERATED_DIR / "STAMP"


def proto_root() -> Path:
    """The directory holding summon/v1/*.proto ($SUMMON_PROTO_DIR or the repo's proto/)."""
    override = os.environ.get("SUMMON_PROTO_DIR")
    if override:
        return Path(override)
    return _PACKAGE_DIR.parents[2] / "proto"


def proto_paths(root: Path) -> list[Path]:
    """The .proto files under ROOT, in generation order."""
    return [root / "summon" / "v1" / f"{name}.proto" for name in PROTO_FILES]


def has_protos(root: Path) -> bool:
    """Whether every .proto file is under ROOT."""
    return all(path.is_file() for path in proto_paths(root))


def fingerprint(root: Path) -> str:
    """A hash of the .proto files' names and contents (the stamp)."""
    digest = hashlib.sha256()
    for path in proto_paths(root):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def generate(root: Path, target: Path) -> None:
    """Writes the stubs of the protos under ROOT into TARGET (a `summon/v1` dir).

    Generated beside TARGET and renamed into place, so a reader never sees
    half a set.
    """
    try:
        import grpc_tools
    except ImportError as error:
        raise RuntimeError(
            "summon needs grpcio-tools to generate its stubs from proto/ "
            "(it is in client/python/requirements.txt; scripts/setup installs it)"
        ) from error
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as out:
        command = [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{well_known}",
            f"--python_out={out}", f"--grpc_python_out={out}",
            *[str(path) for path in proto_paths(root)],
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"grpc_tools.protoc failed ({result.returncode}): {result.stderr.strip()}")
        fresh = Path(out) / "summon" / "v1"
        (fresh / "__init__.py").write_text(
            '"""Generated from proto/summon/v1 by summon._stubs; do not edit."""\n')
        (fresh / "STAMP").write_text(fingerprint(root) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(fresh, target)


def ensure_stubs(force: bool = False) -> Path:
    """Generates the stubs unless an up-to-date copy exists; returns their directory.

    Without the .proto files (an installed wheel) the stubs built into it are
    used as they are. Concurrent processes serialise on a lock file.
    """
    root = proto_root()
    if not has_protos(root):
        if _STAMP.is_file():
            return _GENERATED_DIR
        raise RuntimeError(
            f"summon's stubs are not generated and no protos are at {root} "
            "(set SUMMON_PROTO_DIR)")
    wanted = fingerprint(root)
    with open(_PACKAGE_DIR / ".stubs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = _STAMP.read_text().strip() if _STAMP.is_file() else ""
        if force or current != wanted:
            generate(root, _GENERATED_DIR)
    return _GENERATED_DIR


def main() -> int:
    path = ensure_stubs(force="--force" in sys.argv[1:])
    print(f"summon stubs in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
