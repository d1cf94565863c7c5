"""Progress output: a bar redrawn on a terminal, periodic plain lines elsewhere."""

from __future__ import annotations

import io
import time

from streamworker.ops.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_plain_output_prints_a_line_every_interval_not_every_update() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress("replay d", out, tty=False, every_s=5.0, clock=clock)
    for done in range(1, 1001):
        clock.now += 0.012  # 12 s in all
        progress.update(done, 1000)
    progress.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # after 5 s, after 10 s, and the last
    assert lines[0].startswith("replay d: 417/1,000 entries (42%")
    assert lines[-1].startswith("replay d: 1,000/1,000 entries (100%")
    assert "\r" not in out.getvalue()


def test_plain_output_of_a_short_run_is_one_line() -> None:
    out = io.StringIO()
    progress = Progress("purge d", out, tty=False)
    progress.update(3, 3)
    progress.finish()
    assert out.getvalue() == "purge d: 3/3 entries (100%, 0s)\n"


def test_terminal_output_redraws_one_line_with_a_bar_at_most_ten_times_a_second() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress("replay d", out, tty=True, clock=clock)
    for done in range(1, 101):
        clock.now += 0.01  # one second in all
        progress.update(done, 100)
    progress.finish()
    text = out.getvalue()
    draws = text.count("\r\x1b[K")
    assert 10 <= draws <= 13  # ~10 redraws + the final one + finish
    assert "[#############...........] replay d: 56/100 entries (56%" in text
    assert "[########################] replay d: 100/100 entries (100%" in text
    assert text.endswith("\r\x1b[Kreplay d: 100/100 entries (100%, 1s)\n")


def test_an_unknown_total_counts_with_a_rate() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress("archive orders", out, tty=False, every_s=5.0, clock=clock)
    clock.now += 10
    progress.update(5000)
    assert out.getvalue() == "archive orders: 5,000 entries (10s, 500/s)\n"


def test_a_phase_shows_its_elapsed_time_while_the_caller_blocks() -> None:
    out = io.StringIO()
    progress = Progress("archive orders", out, tty=True)
    with progress.phase("starting Spark"):
        time.sleep(0.35)
    text = out.getvalue()
    assert text.count("archive orders: starting Spark... (0s)") >= 2  # redrawn by the ticker
    assert text.startswith("\r\x1b[K| archive orders") or text.startswith("\r\x1b[K/ archive")


def test_a_phase_in_plain_output_is_announced_once_then_every_interval() -> None:
    out = io.StringIO()
    progress = Progress("archive orders", out, tty=False, every_s=0.2)
    with progress.phase("starting Spark"):
        time.sleep(0.5)
    lines = out.getvalue().splitlines()
    assert lines[0] == "archive orders: starting Spark... (0s)"
    assert 2 <= len(lines) <= 5


def test_archive_while_spark_starts_says_so_every_interval_not_zeros_every_second() -> None:
    from streamworker.cli.archive import archive_progress

    out, clock = io.StringIO(), Clock()
    progress = Progress("archive orders", out, tty=False, every_s=5.0, clock=clock)
    report = archive_progress(progress)
    for _ in range(30):  # archive() polls once a second while the first batch is planned
        clock.now += 1
        report(0, 0)
    clock.now += 1
    report(1, 200)
    lines = out.getvalue().splitlines()
    assert lines[0] == "archive orders: waiting for the first batch... (0s)"
    assert lines[1] == "archive orders: waiting for the first batch... (5s)"
    assert len(lines) == 7  # at 0, 5, ..., 25 s, then the first entries
    assert lines[-1].startswith("archive orders: 200 entries")
    assert not any(": 0 entries" in line for line in lines)
