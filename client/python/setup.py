"""The build hook of client/python (metadata is in pyproject.toml).

Whenever setuptools runs this file (wheel, sdist, editable install) the
gRPC stubs are generated from the .proto files by grpcio-tools into summon/v1, and the
version is read from the repository's VERSION file, the one summond and
summonctl are built with. Both live outside client/python; they are found in
the checkout (../../proto, ../../VERSION), in $SUMMON_PROTO_DIR, or copied
into an sdist's root by its build, so an sdist builds on its own.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _load_stubs():
    # By path: importing the package itself would import its dependencies.
    spec = importlib.util.spec_from_file_location(
        "_summon_stubs", HERE / "summon" / "_stubs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_stubs = _load_stubs()


def proto_root() -> Path:
    override = os.environ.get("SUMMON_PROTO_DIR")
    candidates = [Path(override)] if override else [HERE / "proto", REPO / "proto"]
    for root in candidates:
        if _stubs.has_protos(root):
            return root
    raise RuntimeError(
        "summon: no summon/v1/*.proto under " + ", ".join(map(str, candidates))
        + " (build from the repository, from an sdist, or set SUMMON_PROTO_DIR)")


def version() -> str:
    for path in (HERE / "VERSION", REPO / "VERSION"):
        if path.is_file():
            return path.read_text().strip()
    raise RuntimeError(f"summon: no VERSION file in {HERE} or {REPO}")


def ensure_stubs() -> None:
    """Generates summon/v1 unless its stamp matches the protos.

    Run whenever setuptools runs this file (metadata, sdist, wheel, editable):
    every one of those lists the package `summon.v1`, whose directory must
    exist before any command looks at it.
    """
    root = proto_root()
    target = HERE / "summon" / "v1"
    stamp = target / "STAMP"
    current = stamp.read_text().strip() if stamp.is_file() else ""
    if current != _stubs.fingerprint(root):
        _stubs.generate(root, target)


class SdistWithProtos(sdist):
    """Copies the protos and VERSION into the sdist, which must build alone."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for path in _stubs.proto_paths(root):
            copy = Path(base_dir) / "proto" / path.relative_to(root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
        (Path(base_dir) / "VERSION").write_text(version() + "\n")


ensure_stubs()
setup(version=version(), cmdclass={"sdist": SdistWithProtos})
