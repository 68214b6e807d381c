"""summon.Client against a TLS summond with bearer tokens (docs/operations.md,
"Securing summon"): the right token gets its role, the wrong one, none, or a
spoofed principal header do not."""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

import summon
from seeded import seeded_float32
from summon.local import REPO_ROOT, LocalDaemon

LAYOUT = {"units": [{"fqn": "", "params": [
    {"fqn": "w", "shape": [4], "dtype": "float32"}]}]}


@pytest.fixture
def secure(tmp_path: Path, start_daemon: Callable[..., LocalDaemon]) -> Iterator[dict]:
    pki = tmp_path / "pki"
    subprocess.run([str(REPO_ROOT / "tests/security/make_pki.sh"), str(pki)], check=True)
    tokens = {"admin": "admin-secret", "viewer": "viewer-secret"}
    lines = [f"{hashlib.sha256(t.encode()).hexdigest()} py-{role} {role}"
             for role, t in tokens.items()]
    (tmp_path / "tokens").write_text("\n".join(lines) + "\n")
    daemon = start_daemon(local_ranks=1, insecure_local=False, extra_args=[
        "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
        "--tokens", str(tmp_path / "tokens")])
    yield {"address": daemon.tcp_address, "ca": str(pki / "ca.crt"), "tokens": tokens,
           "tmp": tmp_path}
    # LocalDaemon's own cleanup speaks plaintext: delete the models (and so
    # their shared-memory shards) as the admin.
    with summon.Client(daemon.tcp_address, tls_ca=str(pki / "ca.crt"),
                       token=tokens["admin"]) as admin:
        for model in admin.list_models():
            admin.delete_model(model.name)


def test_tokens_decide_who_calls_and_what_they_may_do(secure: dict) -> None:
    ca, tokens = secure["ca"], secure["tokens"]
    with summon.Client(secure["address"], tls_ca=ca, token=tokens["admin"]) as admin:
        admin.create_model("m", LAYOUT, init="seeded:3")
    # The viewer's header claims to be the admin: the token decides.
    with summon.Client(secure["address"], tls_ca=ca, token=tokens["viewer"],
                       principal="py-admin") as viewer:
        assert [m.name for m in viewer.list_models()] == ["m"]
        with viewer.summon_full_params("m", writeback=False) as params:
            assert params.session.owner == "py-viewer"
            np.testing.assert_array_equal(params.read("w"), seeded_float32("w", 3, 4))
        with pytest.raises(summon.SummonError) as denied:
            viewer.delete_model("m")
        assert denied.value.code == "PERMISSION_DENIED"
        assert "needs the admin role" in denied.value.message


@pytest.mark.parametrize("token,expected", [
    ("not-a-token", "unknown bearer token"),
    (None, "no credentials"),
])
def test_bad_or_missing_tokens_are_unauthenticated(secure: dict, token: str | None,
                                                   expected: str) -> None:
    with summon.Client(secure["address"], tls_ca=secure["ca"], token=token) as client:
        with pytest.raises(summon.SummonError) as error:
            client.list_models()
    assert error.value.code == "UNAUTHENTICATED"
    assert expected in error.value.message


def test_token_file_from_the_environment(secure: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path = secure["tmp"] / "viewer.token"
    path.write_text(secure["tokens"]["viewer"] + "\n")
    monkeypatch.setenv("SUMMON_TOKEN_FILE", str(path))
    with summon.Client(secure["address"], tls_ca=secure["ca"]) as client:
        assert client.list_models() == []
