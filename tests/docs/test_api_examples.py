"""Every `$ command` example of docs/api.md, run against a live summond.

One test per example block (doc_examples.py says how blocks, expected
output and the hidden `docs-test` setup comments are read). A failure names
the document line, the command, and the expected and actual output, so a
drifted example is fixed where it is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

import doc_examples
from summon.local import LocalDaemon, daemon_binary, summonctl_binary

REPO = Path(__file__).resolve().parents[2]
API_MD = REPO / "docs" / "api.md"
BLOCKS = doc_examples.parse_blocks(API_MD.read_text())
# summonctl, summond for the opening example, npy_scale for WriteTensor's.
BIN_DIRS = [str(Path(summonctl_binary()).parent), str(Path(daemon_binary()).parent),
            str(REPO / "bazel-bin" / "examples")]


@pytest.fixture
def daemons() -> Iterator[list[LocalDaemon]]:
    started: list[LocalDaemon] = []
    yield started
    for daemon in started:
        daemon.close()


def test_api_md_has_examples() -> None:
    # A parser that found nothing would pass every block vacuously.
    assert len(BLOCKS) >= 18
    assert sum(len(block.commands) for block in BLOCKS) >= 70


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_api_example(block: doc_examples.Block, tmp_path: Path,
                     daemons: list[LocalDaemon]) -> None:
    def start(data_dir: Path, extra_args: list[str]) -> LocalDaemon:
        data_dir.mkdir()
        daemon = LocalDaemon(local_ranks=4, data_dir=str(data_dir), extra_args=extra_args,
                             binary=daemon_binary())
        daemons.append(daemon)
        return daemon.start()

    failures = doc_examples.run_block(block, tmp_path, start, BIN_DIRS, REPO / "examples")
    assert not failures, f"docs/api.md block at line {block.line}:\n\n" + "\n\n".join(failures)
