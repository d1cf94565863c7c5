"""Run a program on every backend, step by step, and compare normalised replies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.engine.differential.backends import Backend
from tests.engine.differential.normalize import normalize
from tests.engine.differential.resp import pretty
from tests.engine.differential.strategies import Command, Step

QUEUED = b"+QUEUED\r\n"


@dataclass
class Mismatch:
    """The first command whose normalised reply differs from redis-server's."""

    index: int
    conn: int
    argv: Command
    expected: bytes
    actual: bytes
    raw_expected: bytes
    raw_actual: bytes


@dataclass
class Tally:
    """fakeredis's record: it is a reference column only, never asserted on."""

    programs: int = 0
    programs_mismatched: int = 0
    commands: int = 0
    commands_mismatched: int = 0
    first_examples: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"fakeredis vs redis-server: {self.programs_mismatched}/{self.programs} programs and "
            f"{self.commands_mismatched}/{self.commands} commands differ"
        )


def render(program: Sequence[Step]) -> str:
    """The program as numbered redis-cli-like lines."""
    lines = []
    i = 0
    for conn, cmds in program:
        for cmd in cmds:
            lines.append(f"  [{i}] resp{2 + conn}> " + " ".join(_arg(a) for a in cmd))
            i += 1
    return "\n".join(lines)


def _arg(a: bytes) -> str:
    text = a.decode("utf-8", "backslashreplace")
    return (
        text
        if text and " " not in text and '"' not in text
        else '"' + text.replace('"', '\\"') + '"'
    )


def run_program(
    reference: Backend,
    subject: Backend,
    program: Sequence[Step],
    *,
    extra: Backend | None = None,
    tally: Tally | None = None,
) -> Mismatch | None:
    """Run ``program`` on all backends (all reset first). Returns the subject's first mismatch
    (it keeps going until then); ``extra`` (fakeredis) is only tallied."""
    backends = [b for b in (reference, subject, extra) if b is not None]
    for b in backends:
        b.reset()
    # MULTI state per connection, from the reference's replies.
    in_multi = [False, False]
    queued: list[list[list[bytes]]] = [[], []]
    extra_failed = False
    found: Mismatch | None = None
    index = 0
    for conn, cmds in program:
        for cmd in cmds:
            argv = list(cmd)
            name = argv[0].lower() if argv else b""
            exec_queue = queued[conn] if name == b"exec" and in_multi[conn] else None
            ref_raw = reference.call(conn, argv)
            ref = normalize(argv, ref_raw, exec_queue)
            if found is None:
                sub_raw = subject.call(conn, argv)
                sub = normalize(argv, sub_raw, exec_queue)
                if sub != ref:
                    found = Mismatch(index, conn, cmd, ref, sub, ref_raw, sub_raw)
            if extra is not None and tally is not None:
                ex = normalize(argv, extra.call(conn, argv), exec_queue)
                tally.commands += 1
                if ex != ref:
                    tally.commands_mismatched += 1
                    example = f"{' '.join(_arg(a) for a in cmd)}: redis={pretty(ref, 160)} fakeredis={pretty(ex, 160)}"
                    if len(tally.first_examples) < 5 and example not in tally.first_examples:
                        tally.first_examples.append(example)
                    extra_failed = True
            if in_multi[conn]:
                if ref_raw == QUEUED:
                    queued[conn].append(argv)
                elif name in (b"exec", b"discard"):
                    in_multi[conn] = False
            elif name == b"multi" and ref_raw == b"+OK\r\n":
                in_multi[conn] = True
                queued[conn] = []
            index += 1
        if found is not None and extra is None:
            break
    for conn in (0, 1):
        if in_multi[conn]:
            for b in backends:
                b.call(conn, [b"DISCARD"])
    if tally is not None and extra is not None:
        tally.programs += 1
        tally.programs_mismatched += int(extra_failed)
    return found


def describe(program: Sequence[Step], mismatch: Mismatch) -> str:
    """A failure message: the program, the differing command, both replies."""
    return (
        f"engine reply differs from redis-server 7.0 at command [{mismatch.index}] "
        f"(resp{2 + mismatch.conn}):\n{render(program)}\n"
        f"  redis : {pretty(mismatch.expected)}\n"
        f"  engine: {pretty(mismatch.actual)}"
    )
