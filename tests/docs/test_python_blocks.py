"""Every ```python block of README.md and docs/api.md against the package:
each parses (a `>>>` transcript as the code it shows), and every keyword
argument it passes to a method or function of summon (summon.Client, the
session context manager, summon.torch, ...) is a parameter that callable
has. A renamed or removed option fails here, as a flag does for summonctl."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from typing import Callable, Iterator

import pytest

import summon
import summon.integrations.accelerate
import summon.integrations.hf
import summon.integrations.lightning
import summon.mapping
import summon.session
import summon.torch

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", REPO / "docs" / "api.md"]
# Summon callables the documents' blocks pass keywords to today: a matcher
# that stops finding calls, or blocks that stop using one, fails
# test_the_blocks_call_the_api_with_keywords.
CALLED_WITH_KEYWORDS = {"Client", "map_shards", "open_session", "serve",
                        "summon_full_params"}


def python_blocks(path: Path) -> Iterator[tuple[int, str]]:
    """(first line, code) of each ```python block; transcripts keep their code."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start, body = i + 2, []
            i += 1
            # A block inside a list item is indented, its fence too.
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            if any(line.startswith(">>> ") for line in body):
                body = [line[4:] for line in body if line.startswith((">>> ", "... "))]
            yield start, textwrap.dedent("\n".join(body))
        i += 1


BLOCKS = [(f"{path.name}:{line}", code) for path in DOCUMENTS
          for line, code in python_blocks(path)]


def callables() -> dict[str, list[Callable]]:
    """Public callables of the package by name."""
    found: dict[str, list[Callable]] = {}
    owners = [summon.Client, summon.session.FullParams, summon.mapping.SessionMapping,
              summon.torch, summon.integrations.accelerate, summon.integrations.hf,
              summon.integrations.lightning]
    owners += [member for _, member in inspect.getmembers(summon.torch, inspect.isclass)
               if member.__module__ == "summon.torch"]
    for owner in owners:
        for name, member in inspect.getmembers(owner, callable):
            if not name.startswith("_") or name == "__init__":
                found.setdefault(name, []).append(member)
    found.setdefault("Client", []).append(summon.Client)
    return found


def accepts(function: Callable, keywords: set[str]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return True
    return keywords <= {p.name for p in parameters}


def test_the_documents_have_python_blocks() -> None:
    assert len(BLOCKS) >= 8


def foreign_names(tree: ast.AST) -> set[str]:
    """Names a block imports from outside summon (a framework's `Trainer`,
    `import lightning.pytorch as L`): calls through them are not summon's."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("summon"):
            names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                      if not alias.name.startswith("summon")}
    return names


def checked_calls(where: str, code: str) -> list[str]:
    """The summon callables a block passes keywords to, each checked to take
    them all (AssertionError naming the block and call otherwise)."""
    tree = ast.parse(code, filename=where)  # a block that does not parse fails
    known = callables()
    foreign = foreign_names(tree)
    checked = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        keywords = {k.arg for k in node.keywords if k.arg is not None}
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        if name not in known or not keywords or getattr(root, "id", None) in foreign:
            continue
        checked.append(name)
        assert any(accepts(f, keywords) for f in known[name]), (
            f"{where}: {name}({', '.join(sorted(keywords))}): no summon callable "
            f"named {name} takes all of these")
    return checked


@pytest.mark.parametrize("where,code", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_python_block_matches_the_package(where: str, code: str) -> None:
    checked_calls(where, code)


def test_the_blocks_call_the_api_with_keywords() -> None:
    """The check above looks at the calls users copy: the documents pass
    keywords to these (a matcher that found none would pass every block)."""
    checked = {name for where, code in BLOCKS for name in checked_calls(where, code)}
    assert CALLED_WITH_KEYWORDS <= checked, sorted(CALLED_WITH_KEYWORDS - checked)


def test_a_framework_call_is_not_summons() -> None:
    """A framework's own Trainer (summon.torch has one too) is left alone; the
    same call without the import is checked."""
    code = 'from transformers import Trainer\nTrainer(model, callbacks=[])'
    assert checked_calls("example", code) == []
    with pytest.raises(AssertionError, match="callbacks"):
        checked_calls("example", "Trainer(model, callbacks=[])")


def test_a_stale_keyword_is_caught() -> None:
    code = 'client.summon_full_params("m", writeback_never=True)'
    with pytest.raises(AssertionError, match="writeback_never"):
        checked_calls("example", code)
