"""Runs the `$ command` examples of a Markdown document against a live summond.

An example block is a fenced code block with at least one line starting
with `$ `. Each such line is a command (run by bash, so `# comments` and
`sleep 1; summonctl ...` work as written); the lines up to the next command
are its expected output: stdout, then stderr, then `[exit N]` when the exit
code is not 0. Comparison is line by line after collapsing runs of spaces,
with these allowances for what differs from run to run:
- a line `[...]` or `[... any words ...]` stands for zero or more lines;
- a session id `s-` + 16 hex digits in the document stands for the id the
  daemon handed out: the first time an id appears (in expected output or
  through a `bind` directive) it is bound to the real one, and later commands
  use the real one wherever the document writes the documented one;
- RFC 3339 timestamps, 13-digit Unix milliseconds, the shared-memory
  instance hash, spdlog's time stamps, a 5-digit loopback port (one that
  port 0 picked) and the run's working directory (`/tmp/apidoc`) match any
  value of their kind.

Each block runs in a fresh working directory (with `examples/` copied in)
against its own summond (4 local ranks, `--data-dir /tmp/apidoc/data`).
What a block needs beforehand is written in an HTML comment right before
it, invisible when the Markdown is rendered:

    <!-- docs-test
    daemon: --memory-budget 20000          extra summond flags
    setup: summonctl model create ...      a bash command run before the block
    before 3: summonctl trainer phase ...  run before the block's 3rd command
    setup: bind s-7216c4974a53caa4 = summonctl session open gpt --scope layers.0
    before 5: restart --admins ops         restart summond, adding flags
    -->

`bind ID = COMMAND` runs COMMAND and binds the documented ID to the session
id it prints. Directive commands must succeed; their output is not checked.
`daemon: none` starts no daemon: the block starts its own (a command ending
in `&` runs in the background until the block ends, and its first lines of
output are compared). $SUMMOND_PID is the block's daemon.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Protocol

SESSION_ID = re.compile(r"s-[0-9a-f]{16}")
ELISION = re.compile(r"^\[\.\.\.(?: [^\]]*)?\]$")
EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")
DOC_ROOT = "/tmp/apidoc"

# Values that differ from run to run, as (pattern in the document, regex).
_VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"),
     r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"),
    (re.compile(r'"\d{13}"'), r'"\d{13}"'),
    (re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\]"),  # spdlog's time
     r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\]"),
    (re.compile(r"summon-[0-9a-f]{12}-"), r"summon-[0-9a-f]{12}-"),
    (re.compile(r"127\.0\.0\.1:\d{5}"), r"127\.0\.0\.1:\d{4,5}"),  # a port picked by port 0
]


class Daemon(Protocol):
    """What the runner needs of a summond (summon.local.LocalDaemon is one)."""

    address: str
    process: subprocess.Popen
    extra_args: list[str]

    def restart(self) -> "Daemon": ...


@dataclasses.dataclass
class Command:
    line: int  # 1-based line in the document
    text: str
    expected: list[str]
    exit_code: int


@dataclasses.dataclass
class Directives:
    daemon_args: list[str] = dataclasses.field(default_factory=list)
    setup: list[str] = dataclasses.field(default_factory=list)
    before: dict[int, list[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Block:
    line: int  # 1-based line of the opening fence
    heading: str
    commands: list[Command]
    directives: Directives

    @property
    def name(self) -> str:
        # "ReadTensor: `summonctl tensor read ...`" -> "L663-ReadTensor".
        title = self.heading.split(":")[0]
        slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")[:32]
        return f"L{self.line}-{slug}"


def _parse_directives(comment: list[str], line: int) -> Directives:
    directives = Directives()
    for text in comment:
        text = text.strip()
        if not text:
            continue
        key, sep, value = text.partition(":")
        if not sep:
            raise ValueError(f"line {line}: docs-test directive without ':': {text!r}")
        key, value = key.strip(), value.strip()
        if key == "daemon":
            directives.daemon_args += value.split()
        elif key == "setup":
            directives.setup.append(value)
        elif re.fullmatch(r"before \d+", key):
            directives.before.setdefault(int(key.split()[1]), []).append(value)
        else:
            raise ValueError(f"line {line}: unknown docs-test directive {key!r}")
    return directives


def parse_blocks(markdown: str) -> list[Block]:
    """Every example block of `markdown` with its directives."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    heading = ""
    pending: Optional[Directives] = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.strip() == "<!-- docs-test":
            start = i
            comment = []
            i += 1
            while i < len(lines) and lines[i].strip() != "-->":
                comment.append(lines[i])
                i += 1
            pending = _parse_directives(comment, start + 1)
        elif line.startswith("```"):
            fence = i
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append((i + 1, lines[i]))
                i += 1
            commands = _parse_commands(body)
            if commands:
                blocks.append(Block(fence + 1, heading, commands, pending or Directives()))
            elif pending is not None:
                raise ValueError(f"line {fence + 1}: docs-test directives before a block "
                                 "without commands")
            pending = None
        i += 1
    return blocks


def _parse_commands(body: list[tuple[int, str]]) -> list[Command]:
    commands: list[Command] = []
    for number, text in body:
        if text.startswith("$ "):
            commands.append(Command(number, text[2:], [], 0))
        elif commands:
            exit_match = EXIT_LINE.match(text)
            if exit_match:
                commands[-1].exit_code = int(exit_match.group(1))
            else:
                commands[-1].expected.append(text)
    return commands


def _collapse(text: str) -> str:
    return re.sub(r" +", " ", text).rstrip()


class Bindings:
    """Documented session id -> the id this run got."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def substitute(self, text: str) -> str:
        return SESSION_ID.sub(lambda m: self.ids.get(m.group(0), m.group(0)), text)

    def pattern(self, expected: str) -> tuple[re.Pattern, dict[str, str]]:
        """A regex for an expected line; groups name the unbound session ids."""
        expected = _collapse(expected)
        groups: dict[str, str] = {}
        parts = []
        position = 0
        spans = []
        for regex, replacement in _VOLATILE:
            spans += [(m.start(), m.end(), replacement) for m in regex.finditer(expected)]
        for m in SESSION_ID.finditer(expected):
            doc_id = m.group(0)
            if doc_id in self.ids:
                spans.append((m.start(), m.end(), re.escape(self.ids[doc_id])))
            else:
                group = f"id{len(groups)}"
                if doc_id in groups.values():
                    group = next(g for g, d in groups.items() if d == doc_id)
                    spans.append((m.start(), m.end(), f"(?P={group})"))
                else:
                    groups[group] = doc_id
                    spans.append((m.start(), m.end(), f"(?P<{group}>s-[0-9a-f]{{16}})"))
        for start, end, replacement in sorted(spans):
            if start < position:
                continue
            parts.append(re.escape(expected[position:start]))
            parts.append(replacement)
            position = end
        parts.append(re.escape(expected[position:]))
        return re.compile("".join(parts)), groups

    def bind(self, doc_id: str, real_id: str) -> None:
        if doc_id in self.ids and self.ids[doc_id] != real_id:
            raise AssertionError(f"{doc_id} is bound to {self.ids[doc_id]}, not {real_id}")
        self.ids[doc_id] = real_id


def match_output(expected: list[str], actual: list[str], bindings: Bindings) -> Optional[str]:
    """None when `actual` matches `expected` (binding new ids), else why not."""
    raw = actual
    actual = [_collapse(line) for line in actual]
    compiled = [None if ELISION.match(line.strip()) else bindings.pattern(line)
                for line in expected]

    # Lines match greedily in order; an elision tries every possible length.
    def walk(e: int, a: int, found: dict[str, str]) -> Optional[dict[str, str]]:
        if e == len(compiled):
            return found if a == len(actual) else None
        if compiled[e] is None:
            for skip in range(a, len(actual) + 1):
                result = walk(e + 1, skip, found)
                if result is not None:
                    return result
            return None
        if a == len(actual):
            return None
        regex, groups = compiled[e]
        m = regex.fullmatch(actual[a])
        if not m:
            return None
        new = dict(found)
        for group, doc_id in groups.items():
            if new.get(doc_id, m.group(group)) != m.group(group):
                return None
            new[doc_id] = m.group(group)
        return walk(e + 1, a + 1, new)

    found = walk(0, 0, {})
    if found is None:
        return _explain(expected, raw)
    for doc_id, real_id in found.items():
        bindings.bind(doc_id, real_id)
    return None


def _explain(expected: list[str], actual: list[str]) -> str:
    return ("expected:\n" + "\n".join("  | " + line for line in expected) +
            "\nactual:\n" + "\n".join("  | " + line for line in actual))


class BlockRunner:
    """Runs one block's commands in `workdir` as one shell session would.

    Each command runs in its own bash, but variables it exports carry over to
    the next (the environment is saved after every command), `/tmp/apidoc`
    in a command means `workdir`, and a command ending in `&` keeps running
    in the background until the block ends.
    """

    def __init__(self, workdir: Path, bin_dirs: list[str]):
        self.workdir = workdir
        self.bindings = Bindings()
        self.env = dict(os.environ)
        # `python3` in a block is summon's environment, the one running the
        # tests (its venv's bin), as after `source <venv>/bin/activate`.
        python_bin = str(Path(sys.executable).parent)
        self.env["PATH"] = os.pathsep.join(bin_dirs + [python_bin, self.env.get("PATH", "")])
        self.background: list[subprocess.Popen] = []
        self._env_file = workdir / ".docs-test-env"

    def use_daemon(self, daemon: Daemon) -> None:
        self.env["SUMMON_SERVER"] = daemon.address
        # Directives find the daemon's shared-memory segments in its maps.
        self.env["SUMMOND_PID"] = str(daemon.process.pid)

    def _prepare(self, command: str) -> str:
        return self.bindings.substitute(command).replace(DOC_ROOT, str(self.workdir))

    def _bash(self, command: str) -> subprocess.CompletedProcess:
        script = f'{command}\nstatus=$?\nenv -0 > "{self._env_file}"\nexit $status\n'
        run = subprocess.run(["bash", "-c", script], cwd=self.workdir, env=self.env,
                             capture_output=True, text=True, timeout=120)
        if self._env_file.exists():
            saved = self._env_file.read_text().split("\0")
            self.env = dict(item.split("=", 1) for item in saved if "=" in item)
            self._env_file.unlink()
        return run

    def _unroot(self, text: str) -> str:
        return text.replace(str(self.workdir), DOC_ROOT)

    def directive(self, command: str) -> None:
        bind = re.fullmatch(r"bind (s-[0-9a-f]{16}) = (.*)", command)
        run = self._bash(self._prepare(bind.group(2) if bind else command))
        if run.returncode != 0:
            raise AssertionError(f"docs-test directive {command!r} exited "
                                 f"{run.returncode}:\n{run.stdout}{run.stderr}")
        if bind:
            self.bindings.bind(bind.group(1), run.stdout.strip())

    def _start_background(self, command: Command) -> list[str]:
        """Starts `command` (ending in &); returns the lines it printed first."""
        log = self.workdir / f".docs-test-bg{len(self.background)}"
        with open(log, "w") as out:
            self.background.append(subprocess.Popen(
                ["bash", "-c", "exec " + self._prepare(command.text.rstrip(" &"))],
                cwd=self.workdir, env=self.env, stdout=out, stderr=subprocess.STDOUT))
        wanted = sum(1 for line in command.expected if not ELISION.match(line.strip()))
        deadline = time.monotonic() + 30
        lines: list[str] = []
        while time.monotonic() < deadline:
            lines = log.read_text().splitlines()
            if len(lines) >= wanted or self.background[-1].poll() is not None:
                break
            time.sleep(0.05)
        return [self._unroot(line) for line in lines]

    def command(self, command: Command) -> Optional[str]:
        if command.text.endswith(" &"):
            actual, code = self._start_background(command), 0
        else:
            run = self._bash(self._prepare(command.text))
            actual = (self._unroot(run.stdout) + self._unroot(run.stderr)).splitlines()
            code = run.returncode
        problem = None
        if code != command.exit_code:
            problem = f"exit code {code}, documented {command.exit_code}"
        mismatch = match_output(command.expected, actual, self.bindings)
        if mismatch:
            problem = (problem + "\n" if problem else "") + mismatch
        return problem

    def close(self) -> None:
        for process in self.background:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run_block(block: Block, workdir: Path, start_daemon: Callable[[Path, list[str]], Daemon],
              bin_dirs: list[str], examples: Path) -> list[str]:
    """Every failure of `block`, as 'line N: $ command: why' (empty when all pass).

    Besides bash commands, a directive may be `restart [FLAGS]`: the daemon
    stops and starts again on its data dir, with FLAGS added to its flags.
    `daemon: none` starts no daemon (the block starts its own).
    """
    shutil.copytree(examples, workdir / "examples")
    runner = BlockRunner(workdir, bin_dirs)
    daemon = None
    if block.directives.daemon_args != ["none"]:
        daemon = start_daemon(workdir / "data", block.directives.daemon_args)
        runner.use_daemon(daemon)

    def directive(command: str) -> None:
        if command == "restart" or command.startswith("restart "):
            if daemon is None:
                raise AssertionError("docs-test: restart without a daemon")
            daemon.extra_args += command.split()[1:]
            runner.use_daemon(daemon.restart())
        else:
            runner.directive(command)

    failures = []
    try:
        for command in block.directives.setup:
            directive(command)
        for index, command in enumerate(block.commands, start=1):
            for command_before in block.directives.before.get(index, []):
                directive(command_before)
            problem = runner.command(command)
            if problem:
                failures.append(f"line {command.line}: $ {command.text}\n{problem}")
    finally:
        runner.close()
    return failures
