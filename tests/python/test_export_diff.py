"""`summonctl session export` (.npz and safetensors) and `summonctl tensor
diff` (issue 33) against a real summond: every exported tensor read back
with numpy (np.load) and with a reader of the safetensors format written
here from its specification, equal bit for bit to what the session reads;
diff's counts and maximum differences equal numpy's over the same values,
between two sessions and against a checkpoint `model save` wrote."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import summon
from summon.local import REPO_ROOT, LocalDaemon, summonctl_binary

SCOPE = "layers.1"
FQN = "layers.1.attn.qkv.weight"
NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def summonctl(daemon: LocalDaemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([summonctl_binary(), "--server", daemon.address, "--quiet", *args],
                          capture_output=True, text=True, timeout=60)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The format's specification: an 8-byte little-endian header length N,
    N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}}
    relative to the first byte after the header, then the data."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    ends = sorted(entry["data_offsets"] for entry in header.values())
    assert ends[0][0] == 0 and ends[-1][1] == len(data)  # no gap, nothing after
    for (_, end), (begin, _) in zip(ends, ends[1:]):
        assert end == begin
    return {name: np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]],
                                NUMPY_DTYPES[e["dtype"]]).reshape(e["shape"])
            for name, e in header.items()}


@pytest.fixture
def gpt(client: summon.Client) -> summon.Client:
    client.create_model("gpt", (REPO_ROOT / "examples/gpt_tiny.json").read_text(),
                        init="seeded:42")
    return client


def session_values(client: summon.Client, session: summon.Session,
                   dtype: str | None = None) -> dict[str, np.ndarray]:
    return {t.fqn: client.read_tensor(session.id, t.fqn, dtype=dtype) for t in session.params}


def test_export_writes_every_tensor_bit_for_bit(gpt: summon.Client, daemon: LocalDaemon,
                                                tmp_path: Path) -> None:
    session = gpt.open_session("gpt", scope=SCOPE, writeback=False)
    try:
        want = session_values(gpt, session)
        assert len(want) == 7
        npz = tmp_path / "scope.npz"
        done = summonctl(daemon, "session", "export", session.id, "--out", str(npz))
        assert done.returncode == 0, done.stderr
        lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
        assert lines[0] == (f"exported 7 tensors of session {session.id} to {npz} "
                            f"(npz, {npz.stat().st_size} bytes)")
        assert lines[1] == "FQN DTYPE SHAPE NUMEL"
        assert [line.split()[0] for line in lines[2:]] == list(want)
        with np.load(npz) as archive:  # zipfile checks each member's CRC
            assert archive.files == list(want)
            for fqn, values in want.items():
                assert archive[fqn].dtype == np.float32
                assert archive[fqn].shape == values.shape
                assert archive[fqn].tobytes() == values.tobytes(), fqn

        st = tmp_path / "scope.safetensors"
        done = summonctl(daemon, "-o", "json", "session", "export", session.id, "--out",
                         str(st))
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert (answer["format"], answer["bytes"], answer["session"]) == (
            "safetensors", st.stat().st_size, session.id)
        assert [(t["fqn"], t["dtype"]) for t in answer["tensors"]] == [
            (fqn, "DTYPE_FLOAT32") for fqn in want]
        got = read_safetensors(st)
        assert list(got) == list(want)
        for fqn, values in want.items():
            assert got[fqn].shape == values.shape and got[fqn].tobytes() == values.tobytes()

        # --dtype converts as reads do; --format names the format of stdout.
        half = session_values(gpt, session, dtype="float16")
        done = subprocess.run([summonctl_binary(), "--server", daemon.address, "--quiet",
                               "session", "export", session.id, "--out", "-", "--format",
                               "safetensors", "--dtype", "float16", "--no-map"],
                              capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        (tmp_path / "half.safetensors").write_bytes(done.stdout)
        got = read_safetensors(tmp_path / "half.safetensors")
        for fqn, values in half.items():
            assert got[fqn].dtype == np.float16 and got[fqn].tobytes() == values.tobytes()
    finally:
        gpt.close_session(session.id)

    refused = summonctl(daemon, "session", "export", session.id, "--out",
                        str(tmp_path / "x.npz"))
    assert refused.returncode == 9 and "closed" in refused.stderr
    assert not (tmp_path / "x.npz").exists()
    nameless = summonctl(daemon, "session", "export", "s-1", "--out", str(tmp_path / "x.bin"))
    assert nameless.returncode == 3
    assert "name a .npz or .safetensors file, or give --format" in nameless.stderr


def diff(daemon: LocalDaemon, *args: str) -> dict:
    done = summonctl(daemon, "-o", "json", "tensor", "diff", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_diff_between_sessions_and_against_a_checkpoint(gpt: summon.Client,
                                                        daemon: LocalDaemon) -> None:
    checkpoint = Path(daemon.data_dir) / "checkpoints" / "before"
    gpt.save_model("gpt", str(checkpoint))
    before = gpt.open_session("gpt", params=[FQN], writeback=False)
    original = gpt.read_tensor(before.id, FQN)
    edited = original.copy().reshape(-1)
    edited[3] += np.float32(0.5)
    edited[7] = np.float32(0)
    edited[11] = -edited[11]
    edited = edited.reshape(original.shape)
    editor = gpt.open_session("gpt", params=[FQN])
    gpt.write_tensor(editor.id, FQN, edited)
    try:
        a = original.astype(np.float64).reshape(-1)
        b = edited.astype(np.float64).reshape(-1)
        differs = a != b
        got = diff(daemon, before.id, FQN, "--session", editor.id)
        assert got == {
            "a": f"session {before.id} {FQN}", "b": f"session {editor.id} {FQN}",
            "shape": list(original.shape), "numel": original.size,
            "differing": 3, "firstDiffering": 3,
            "maxAbsDiff": float(np.abs(a - b).max()),
            "maxRelDiff": float((np.abs(a - b)[differs] / np.abs(b[differs])).max())
            if b[differs].all() else "inf"}
        # Element 7 became 0: its relative difference is infinite.
        assert got["maxRelDiff"] == "inf"
        same = diff(daemon, before.id, FQN, "--checkpoint", str(checkpoint))
        assert (same["differing"], same["firstDiffering"], same["maxAbsDiff"],
                same["maxRelDiff"]) == (0, -1, 0, 0)
        table = summonctl(daemon, "tensor", "diff", editor.id, FQN, "--checkpoint",
                          str(checkpoint))
        assert table.returncode == 0, table.stderr
        rows = dict(line.split(None, 1) for line in table.stdout.splitlines())
        assert (rows["differing"], rows["first_differing"], rows["numel"]) == (
            "3", "3", str(original.size))
        assert float(rows["max_abs_diff"]) == pytest.approx(float(np.abs(a - b).max()),
                                                            rel=1e-5)
        # Another tensor's name on the other side, and a shape that differs.
        mismatch = summonctl(daemon, "tensor", "diff", before.id, FQN, "--checkpoint",
                             str(checkpoint), "--name", "norm.weight")
        assert mismatch.returncode == 3, mismatch.stderr
        shape = ", ".join(str(d) for d in original.shape)
        assert mismatch.stderr == (
            f"ERROR INVALID_ARGUMENT: cannot compare: session {before.id} {FQN} has shape "
            f"[{shape}], checkpoint {checkpoint} norm.weight has shape [16]\n")
        missing = summonctl(daemon, "tensor", "diff", before.id, FQN, "--checkpoint",
                            str(checkpoint), "--name", "nope")
        assert missing.returncode == 5 and "has no tensor nope" in missing.stderr
        neither = summonctl(daemon, "tensor", "diff", before.id, FQN)
        assert neither.returncode == 3 and "--session ID2 or --checkpoint PATH" in \
            neither.stderr
    finally:
        gpt.close_session(before.id)
        gpt.close_session(editor.id, abort=True)
