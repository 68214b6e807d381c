"""The example runner's own rules: parsing, elisions, session-id binding."""

from __future__ import annotations

import doc_examples
import pytest
from doc_examples import Bindings, match_output

PAGE = """\
# Verbs
<!-- docs-test
daemon: --admins ops
setup: summonctl model create gpt --layout examples/gpt_tiny.json
before 2: bind s-1111111111111111 = summonctl session open gpt
-->
```
$ summonctl session open gpt --scope layers.1   # a comment
s-d9e00e17a1bd258a
$ summonctl session close s-d9e00e17a1bd258a
ERROR ABORTED: no
[exit 10]
```
```json
{"not": "an example"}
```
"""


def test_parse_reads_commands_outputs_exit_codes_and_directives() -> None:
    [block] = doc_examples.parse_blocks(PAGE)
    assert block.name == "L7-Verbs"
    assert [c.text for c in block.commands] == [
        "summonctl session open gpt --scope layers.1   # a comment",
        "summonctl session close s-d9e00e17a1bd258a"]
    assert [c.line for c in block.commands] == [8, 10]
    assert block.commands[0].expected == ["s-d9e00e17a1bd258a"]
    assert (block.commands[0].exit_code, block.commands[1].exit_code) == (0, 10)
    assert block.commands[1].expected == ["ERROR ABORTED: no"]
    assert block.directives.daemon_args == ["--admins", "ops"]
    assert block.directives.setup == [
        "summonctl model create gpt --layout examples/gpt_tiny.json"]
    assert block.directives.before == {
        2: ["bind s-1111111111111111 = summonctl session open gpt"]}


def test_unknown_directive_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown docs-test directive 'befor 2'"):
        doc_examples.parse_blocks("<!-- docs-test\nbefor 2: x\n-->\n```\n$ x\n```\n")


def test_columns_match_whatever_their_widths() -> None:
    assert match_output(["A  B", "1  22"], ["A    B", "1    22  "], Bindings()) is None
    assert match_output(["A  B", "1  22"], ["A B", "1 23"], Bindings()) is not None


def test_an_elision_stands_for_any_number_of_lines() -> None:
    expected = ["head", "[... rows ...]", "tail"]
    assert match_output(expected, ["head", "tail"], Bindings()) is None
    assert match_output(expected, ["head", "x", "y", "tail"], Bindings()) is None
    assert match_output(expected, ["head", "x"], Bindings()) is not None
    assert match_output(["[...]"], [], Bindings()) is None


def test_missing_and_extra_lines_fail() -> None:
    assert match_output(["a", "b"], ["a"], Bindings()) is not None
    assert match_output(["a"], ["a", "b"], Bindings()) is not None
    assert match_output([], ["surprise"], Bindings()) is not None


def test_a_session_id_binds_once_and_is_substituted_later() -> None:
    bindings = Bindings()
    assert match_output(["s-d9e00e17a1bd258a"], ["s-0123456789abcdef"], bindings) is None
    assert bindings.substitute("close s-d9e00e17a1bd258a") == "close s-0123456789abcdef"
    # Once bound, the documented id means that session and no other.
    assert match_output(["id s-d9e00e17a1bd258a"], ["id s-0123456789abcdef"], bindings) is None
    assert match_output(["id s-d9e00e17a1bd258a"], ["id s-fedcba9876543210"],
                        bindings) is not None
    # Two documented ids in one line must be two sessions consistently.
    fresh = Bindings()
    assert match_output(["s-aaaaaaaaaaaaaaaa s-aaaaaaaaaaaaaaaa"],
                        ["s-0000000000000001 s-0000000000000002"], fresh) is not None


def test_times_ports_and_instance_hashes_vary() -> None:
    expected = ["expires 2026-11-22T08:17:47.690Z at 127.0.0.1:37583 in /summon-d4f50786c6c7-m"]
    actual = ["expires 2027-01-02T10:00:00.001Z at 127.0.0.1:41000 in /summon-0123456789ab-m"]
    assert match_output(expected, actual, Bindings()) is None
    # A fixed port (here 1) is not a picked one and must match exactly.
    assert match_output(["127.0.0.1:1"], ["127.0.0.1:2"], Bindings()) is not None
    assert match_output(["/summon-d4f50786c6c7-m"], ["/summon-d4f50786c6c7-n"],
                        Bindings()) is not None
