"""client/python as an installed package: the wheel scripts/test builds,
installed into a fresh venv that holds nothing but the wheel and its declared
dependencies, runs a smoke flow against a real summond; and the version is
the repository's VERSION, the same as summond's and summonctl's.

The fresh venv is made offline and honestly: Debian's /usr/bin/python3 -m
venv (no system site-packages); `pip install --no-index` of the wheel, whose
dependencies (grpcio, protobuf, numpy) pip must find already installed or
fail. They come from a directory of symlinks, added through a .pth file, to
exactly the distributions the wheel declares (read from its METADATA) and
what those need (typing-extensions), in summon's environment. torch and
grpcio-tools are absent, so what runs is the wheel's own stubs and summon
without torch. The wheel is $SUMMON_WHEEL_DIR's (scripts/test builds it),
else one built here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import summon
from seeded import seeded_float32
from summon.local import LocalDaemon, daemon_binary, summonctl_binary

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "VERSION").read_text().strip()

SMOKE = r'''
import json, sys
import numpy as np
import summon
from importlib import metadata

address, site = sys.argv[1], sys.argv[2]
assert summon.__file__.startswith(site), summon.__file__
for absent in ("torch", "grpc_tools"):
    try:
        __import__(absent)
    except ImportError:
        pass
    else:
        raise AssertionError(absent + " is importable in the fresh venv")
layout = {"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "w", "shape": [6, 5], "dtype": "float32"}]}]}
with summon.Client(address, timeout=30) as client:
    client.create_model("smoke", layout, init="seeded:42")
    with client.summon_full_params("smoke", writeback=False) as session:
        w = session.read("w")
    client.delete_model("smoke")
print(json.dumps({"version": metadata.version("summon"), "dunder": summon.__version__,
                  "shape": list(w.shape),
                  "bits": w.astype(np.float32).view(np.uint32).ravel().tolist()}))
'''


def _wheel(tmp_path: Path) -> Path:
    wheel_dir = os.environ.get("SUMMON_WHEEL_DIR")
    if not wheel_dir:
        wheel_dir = str(tmp_path / "wheels")
        shutil.rmtree(REPO / "client" / "python" / "build", ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--no-build-isolation", "--wheel-dir", wheel_dir,
                        str(REPO / "client" / "python")], check=True)
    wheels = sorted(Path(wheel_dir).glob("summon-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _declared_dependencies(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist names outside extras (grpcio, protobuf, numpy)."""
    from packaging.requirements import Requirement
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode().splitlines()
    requirements = [Requirement(line.split(":", 1)[1]) for line in lines
                    if line.startswith("Requires-Dist:")]
    return sorted(r.name for r in requirements
                  if r.marker is None or r.marker.evaluate({"extra": ""}))


def _dependency_closure(names: list[str]) -> list[str]:
    """NAMES and what they require in this environment, recursively (no extras)."""
    from packaging.requirements import Requirement
    seen: list[str] = []
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.append(name)
        for line in metadata.requires(name) or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def _link_dependencies(names: list[str], target: Path) -> None:
    """Symlinks the top-level entries of NAMES' distributions (and of what
    they pull in) into TARGET."""
    target.mkdir()
    for name in _dependency_closure(names):
        dist = metadata.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or ()}:
            source = Path(dist.locate_file(top))
            if top.endswith(".pth") or top == ".." or not source.exists():
                continue
            if not (target / top).exists():
                (target / top).symlink_to(source)


def test_wheel_installs_into_a_fresh_venv_and_serves_a_session(
        tmp_path: Path, daemon: LocalDaemon) -> None:
    wheel = _wheel(tmp_path)
    assert wheel.name == f"summon-{VERSION}-py3-none-any.whl"
    tree = REPO / "client" / "python"
    sources = {str(path.relative_to(tree)) for path in (tree / "summon").rglob("*.py")
               if "__pycache__" not in path.parts}
    with zipfile.ZipFile(wheel) as archive:
        assert sources <= set(archive.namelist())  # every module, the stubs too
    venv = tmp_path / "fresh"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    declared = _declared_dependencies(wheel)
    assert declared == ["grpcio", "numpy", "protobuf"]
    _link_dependencies(declared, tmp_path / "deps")
    (site / "summon-declared-deps.pth").write_text(str(tmp_path / "deps") + "\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # pip resolves the wheel's Requires-Dist against what is installed: a
    # dependency missing or of the wrong version fails here, offline.
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index",
                    "--no-cache-dir", str(wheel)], check=True, env=env, cwd=tmp_path)

    # Outside the checkout, with no PYTHONPATH: only the installed copy.
    result = subprocess.run([str(python), "-c", SMOKE, daemon.address, str(site)],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    smoke = json.loads(result.stdout)
    assert smoke["version"] == VERSION and smoke["dunder"] == VERSION
    assert smoke["shape"] == [6, 5]
    assert smoke["bits"] == seeded_float32("w", 42, 30).view("uint32").tolist()


def test_an_sdist_builds_alone(tmp_path: Path) -> None:
    """The sdist carries proto/ and VERSION: pip builds it, unpacked away from
    the checkout, into a wheel with the same files as the tree's."""
    build_sdist = f"from setuptools import build_meta; build_meta.build_sdist({str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", build_sdist],
                   check=True, capture_output=True, cwd=REPO / "client" / "python")
    sdist = tmp_path / f"summon-{VERSION}.tar.gz"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(tmp_path / "from_sdist"),
                    str(sdist)], check=True, cwd=tmp_path,
                   env={**os.environ, "SUMMON_PROTO_DIR": ""})
    built = tmp_path / "from_sdist" / f"summon-{VERSION}-py3-none-any.whl"

    def files(wheel: Path) -> list[str]:
        with zipfile.ZipFile(wheel) as archive:
            return sorted(n for n in archive.namelist() if not n.endswith("RECORD"))

    assert files(built) == files(_wheel(tmp_path))
    assert "summon/v1/summon_pb2_grpc.py" in files(built)


def test_version_is_summond_and_summonctls() -> None:
    for binary, name in ((daemon_binary(), "summond"), (summonctl_binary(), "summonctl")):
        out = subprocess.run([binary, "--version"], check=True, capture_output=True,
                             text=True).stdout
        assert out == f"{name} {VERSION} (API summon.v1)\n"
    assert summon.__version__ == VERSION


def test_a_checkout_regenerates_stale_stubs_on_import(tmp_path: Path) -> None:
    """What an editable install runs: a changed .proto regenerates the stubs
    on the next `import summon` (the stamp in summon/v1)."""
    package = tmp_path / "checkout" / "summon"
    shutil.copytree(REPO / "client" / "python" / "summon", package,
                    ignore=shutil.ignore_patterns("v1", "__pycache__", ".stubs.lock"))
    protos = tmp_path / "proto"
    shutil.copytree(REPO / "proto" / "summon", protos / "summon")
    types = protos / "summon" / "v1" / "types.proto"
    probe = ("import summon\n"
             "from summon.v1 import types_pb2\n"
             "print(sorted(n for n in types_pb2.DESCRIPTOR.message_types_by_name"
             " if n.startswith('Probe')))\n")
    env = {**os.environ, "SUMMON_PROTO_DIR": str(protos),
           "PYTHONPATH": str(package.parent)}

    def probes() -> str:
        return subprocess.run([sys.executable, "-c", probe], check=True, env=env,
                              capture_output=True, text=True, cwd=tmp_path).stdout

    assert probes() == "[]\n"  # generated on first import
    types.write_text(types.read_text() + "\nmessage ProbeA { int32 x = 1; }\n")
    assert probes() == "['ProbeA']\n"  # stale: regenerated
    generated = (package / "v1" / "types_pb2.py").stat().st_mtime_ns
    assert probes() == "['ProbeA']\n"  # fresh: left as it is
    assert (package / "v1" / "types_pb2.py").stat().st_mtime_ns == generated
