"""docs/api.md against the binaries, without a daemon: the status table's
codes, every documented `ERROR NAME` with its `[exit N]`, every verb's usage
heading against `summonctl help NOUN VERB`, and every flag written after a
`summonctl NOUN VERB` anywhere on the page against that verb's flags. A
status, flag or exit code that differs from the binary's fails here."""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

import grpc
import pytest

import doc_examples
from summon.local import summonctl_binary

REPO = Path(__file__).resolve().parents[2]
API_MD = (REPO / "docs" / "api.md").read_text()
# summonctl's local file errors exit with sysexits(3) codes under these names.
LOCAL_EXIT_CODES = {"DATAERR": 65, "NOINPUT": 66, "CANTCREAT": 73}
STATUS_CODES = {code.name: code.value[0] for code in grpc.StatusCode}


def exit_code_of(name: str) -> int:
    return LOCAL_EXIT_CODES.get(name, STATUS_CODES.get(name, -1))


@lru_cache(maxsize=None)
def usage(noun: str, verb: str) -> str:
    """The verb's usage line; "" for no such verb (an example of a usage error)."""
    run = subprocess.run([summonctl_binary(), "help", noun, verb], capture_output=True,
                         text=True, check=False)
    return run.stdout.splitlines()[0] if run.returncode == 0 else ""


@lru_cache(maxsize=None)
def global_flags() -> set[str]:
    run = subprocess.run([summonctl_binary(), "help"], capture_output=True, text=True,
                         check=True)
    first = run.stdout.splitlines()[0]
    return set(re.findall(r"--[a-z0-9-]+", first.split("NOUN VERB")[0]))


def test_status_table_matches_grpc() -> None:
    rows = re.findall(r"^\| (\d+) \| ([A-Z_]+) \|", API_MD, re.MULTILINE)
    assert len(rows) >= 14
    for number, name in rows:
        assert STATUS_CODES.get(name) == int(number), f"| {number} | {name} |"


def test_documented_errors_exit_with_their_codes() -> None:
    checked = 0
    for block in doc_examples.parse_blocks(API_MD):
        for command in block.commands:
            for line in command.expected:
                error = re.match(r"ERROR ([A-Z_]+): ", line)
                if error and not command.text.endswith("&"):
                    checked += 1
                    assert exit_code_of(error.group(1)) == command.exit_code, \
                        f"line {command.line}: {line} with [exit {command.exit_code}]"
    assert checked >= 10


HEADING = re.compile(r"^### \w+: `(summonctl (\w+) (\w+)[^`]*)`", re.MULTILINE)


def test_verb_headings_match_summonctl_help() -> None:
    headings = HEADING.findall(API_MD)
    assert len(headings) >= 14
    for written, noun, verb in headings:
        actual = usage(noun, verb)
        assert actual, f"api.md documents `{written}`: summonctl has no such verb"
        if written.endswith(" [options]"):
            assert actual.startswith(written[:-len(" [options]")]), (written, actual)
        else:
            assert written == actual, f"api.md: {written}\nsummonctl help: {actual}"


def test_every_documented_flag_exists() -> None:
    spans = re.findall(r"`(summonctl (\w+) (\w+)(?: [^`]*)?)`", API_MD)
    spans += [(c.text, *c.text.split()[1:3]) for b in doc_examples.parse_blocks(API_MD)
              for c in b.commands if c.text.startswith("summonctl ")]
    checked = 0
    for text, noun, verb in spans:
        if noun in ("help", "completion") or text.startswith("summonctl --") or \
                not usage(noun, verb):
            continue
        known = set(re.findall(r"--[a-z0-9-]+", usage(noun, verb))) | global_flags()
        known |= {"--help"}
        for flag in re.findall(r"(?<![\w-])--[a-z0-9-]+", text.split("#")[0]):
            checked += 1
            assert flag in known, f"`{text}`: summonctl {noun} {verb} has no {flag}"
    assert checked >= 30


@pytest.mark.parametrize("name,code", sorted(LOCAL_EXIT_CODES.items()))
def test_local_exit_codes_are_documented(name: str, code: int) -> None:
    assert f"`{name}` ({code})" in API_MD
