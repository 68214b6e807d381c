"""summonctl's bash completion against a real summond (issue 23): flags per
verb, file paths for file flags, enum values, and model names, session ids
and FQNs asked of the daemon, as kubectl does."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import summon
from summon.local import summonctl_binary

LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "embed.weight", "shape": [8, 4], "dtype": "float32"},
                           {"fqn": "head.weight", "alias_of": "embed.weight"}]},
    {"fqn": "layers.0", "params": [
        {"fqn": "layers.0.attn.qkv.weight", "shape": [12, 4], "dtype": "float32"},
        {"fqn": "layers.0.attn.qkv.bias", "shape": [12], "dtype": "float32"}]},
]}


@pytest.fixture
def complete(daemon, tmp_path: Path):
    """complete('summonctl tensor read ') -> the words bash would offer."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "summonctl").symlink_to(summonctl_binary())
    script = subprocess.run([summonctl_binary(), "completion", "bash"], check=True,
                            capture_output=True, text=True).stdout
    (tmp_path / "completion.bash").write_text(script)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
               SUMMON_SERVER=daemon.address)

    def run(line: str) -> list[str]:
        words = line.split(" ")
        program = (f"source {tmp_path / 'completion.bash'}\n"
                   f"COMP_WORDS=({' '.join(repr(w) for w in words)})\n"
                   f"COMP_CWORD={len(words) - 1}\n"
                   "_summonctl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
        done = subprocess.run(["bash", "-c", program], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return sorted(w for w in done.stdout.splitlines() if w)

    return run


def test_flags_are_completed_per_verb(complete) -> None:
    assert complete("summonctl session open gpt --no") == [
        "--no-recurse", "--no-writeback"]
    assert complete("summonctl session close s-1 --") == sorted(
        ["--abort", "--force", "--server", "--output", "--principal", "--tls-ca",
         "--tls-cert", "--tls-key", "--token-file", "--quiet", "--help", "--version"])
    assert complete("summonctl tensor re") == ["read"]
    assert complete("summonctl session open gpt --read-dtype bf") == ["bfloat16"]


def test_file_flags_complete_paths(complete, tmp_path: Path) -> None:
    (tmp_path / "layout_a.json").write_text("{}")
    (tmp_path / "layout_b.json").write_text("{}")
    assert complete("summonctl model create m --layout layout_") == [
        "layout_a.json", "layout_b.json"]
    assert complete("summonctl tensor read s-1 w --out layout_a") == ["layout_a.json"]
    assert complete("summonctl tensor diff s-1 w --checkpoint layout_a") == [
        "layout_a.json"]
    # A daemon-side path (--from) is not completed from local files.
    assert complete("summonctl model load m --from layout_") == []


def test_names_come_from_the_daemon(complete, client: summon.Client) -> None:
    client.create_model("gpt", LAYOUT, init="seeded:1")
    client.create_model("other", LAYOUT)
    session = client.open_session("gpt", scope="layers.0", writeback=False)
    assert complete("summonctl session open ") == ["gpt", "other"]
    assert complete("summonctl model describe g") == ["gpt"]
    assert complete("summonctl tensor read ") == [session.id]
    assert complete(f"summonctl tensor read {session.id} layers.0.attn.qkv.") == [
        "layers.0.attn.qkv.bias", "layers.0.attn.qkv.weight"]
    assert complete(f"summonctl tensor stats {session.id} layers.0.attn.qkv.bias l") == [
        "layers.0.attn.qkv.bias", "layers.0.attn.qkv.weight"]
    # --scope takes a unit: parameter names would be refused.
    assert complete("summonctl session open gpt --scope lay") == ["layers.0"]
    assert complete("summonctl session open gpt --params he") == ["head.weight"]
    assert complete("summonctl trainer phase gpt 0 for") == ["forward"]
    # session export and tensor diff: the session to compare with, the format.
    assert complete(f"summonctl tensor diff {session.id} layers.0.attn.qkv.bias "
                    "--session ") == [session.id]
    assert complete(f"summonctl session export {session.id} --format s") == [
        "safetensors"]
    client.close_session(session.id)


def test_no_daemon_completes_nothing_quietly(complete) -> None:
    assert complete("summonctl --server 127.0.0.1:1 session open ") == []
