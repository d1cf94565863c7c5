"""The chaos suite's plan, drawn from one seed: which messages are poison and which faults strike
when. Pure (no I/O), so a seed always gives the same plan: ``STREAMWORKER_CHAOS_SEED=N`` replays
a failed run.

A plan is a list of :class:`Fault` episodes, each expanded into timed :class:`Action` steps:

* ``kill``: SIGKILL worker W, start it again ``hold_s`` later (sometimes within ``claim_idle_ms``,
  so it finds its own pending entries; sometimes after, so the others have claimed them);
* ``pause``: SIGSTOP worker W while it is handling a batch, SIGCONT it ``hold_s`` later, past
  ``claim_idle_ms``: a zombie that wakes up holding entries the others have claimed;
* ``restart_redis`` / ``restart_engine``: stop redis-server or the embedded engine's server
  (SIGKILL or SIGTERM), start it again from its append-only file ``hold_s`` later, on the same
  port;
* ``restart_postgres``: stop PostgreSQL (SIGQUIT, an immediate shutdown that needs crash recovery,
  or SIGINT, a fast shutdown), start it again ``hold_s`` later.

Episodes on one worker never overlap, and every worker is running again at the end of the plan.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

SEED_ENV = "STREAMWORKER_CHAOS_SEED"

# What a message does. Healthy ones ("ok", and "slow": a handler longer than claim_idle_ms)
# must take effect exactly once; the others are poison.
KINDS = ("ok", "invalid", "reject", "fail", "slow")
HEALTHY = ("ok", "slow")


def seed_from_env(environ: dict[str, str] | None = None) -> int | None:
    """The seed ``STREAMWORKER_CHAOS_SEED`` asks for, or None when it is unset or empty.

    Raises ValueError with the offending text when it is not a non-negative integer.
    """
    raw = (os.environ if environ is None else environ).get(SEED_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(f"{SEED_ENV} must be a non-negative integer, got {raw!r}")
    return int(raw)


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault episode: starts ``at_s`` seconds into the chaos window and lasts ``hold_s``."""

    kind: str  # "kill" | "pause" | "restart_redis" | "restart_engine" | "restart_postgres"
    at_s: float
    hold_s: float
    worker: int | None = None  # kill and pause
    signal: str = ""  # the signal that stops the server (server restarts)
    # kill: when set, wait for the worker's next handler call and SIGKILL it this long after, so
    # the kill lands inside a batch (in a handler, the commit, the apply script or the XACK)
    # rather than in an idle read; None kills at once, wherever the worker is.
    in_batch_s: float | None = None

    def describe(self) -> str:
        if self.kind == "kill":
            where = "" if self.in_batch_s is None else f" {self.in_batch_s:.3f}s into a batch"
            return (
                f"t={self.at_s:6.2f}s SIGKILL worker {self.worker}{where}, "
                f"restart {self.hold_s:.2f}s later"
            )
        if self.kind == "pause":
            return (
                f"t={self.at_s:6.2f}s SIGSTOP worker {self.worker} mid-batch, "
                f"SIGCONT {self.hold_s:.2f}s later"
            )
        server = self.kind.removeprefix("restart_")
        return f"t={self.at_s:6.2f}s {self.signal} {server}, start it {self.hold_s:.2f}s later"


@dataclass(frozen=True, slots=True)
class Action:
    """One step of a fault, at ``at_s``: ``verb`` is kill/start/stop/cont (a worker) or
    restart_<server> (stop with ``signal``, wait ``hold_s``, start)."""

    at_s: float
    verb: str
    worker: int | None = None
    signal: str = ""
    hold_s: float = 0.0
    in_batch_s: float | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything one seed decides for one scenario."""

    seed: int
    scenario: str
    kinds: tuple[str, ...]  # the kind of message i
    faults: tuple[Fault, ...]
    window_s: float

    def actions(self) -> list[Action]:
        """The faults as timed steps, in the order to perform them."""
        steps: list[Action] = []
        for f in self.faults:
            if f.kind == "kill":
                steps.append(Action(f.at_s, "kill", f.worker, in_batch_s=f.in_batch_s))
                steps.append(Action(f.at_s + f.hold_s, "start", f.worker))
            elif f.kind == "pause":
                steps.append(Action(f.at_s, "stop", f.worker))
                steps.append(Action(f.at_s + f.hold_s, "cont", f.worker))
            else:
                steps.append(Action(f.at_s, f.kind, signal=f.signal, hold_s=f.hold_s))
        return sorted(steps, key=lambda a: a.at_s)

    def poison(self) -> dict[int, str]:
        """Message index -> kind, for the poison messages."""
        return {i: k for i, k in enumerate(self.kinds) if k not in HEALTHY}

    def describe(self) -> str:
        counts = {k: self.kinds.count(k) for k in KINDS}
        lines = [
            f"chaos seed {self.seed}, scenario {self.scenario} "
            f"(replay: {SEED_ENV}={self.seed} pytest tests/chaos -k {self.scenario})",
            f"messages: {len(self.kinds)} " + ", ".join(f"{k}={n}" for k, n in counts.items() if n),
            f"faults over a {self.window_s:.0f}s window:",
        ]
        lines += ["  " + f.describe() for f in self.faults]
        return "\n".join(lines)


def make_plan(
    seed: int,
    scenario: str,
    *,
    messages: int,
    workers: int,
    window_s: float,
    claim_idle_ms: int,
    servers: tuple[str, ...],
    kills: int = 4,
    poison_fraction: float = 0.06,
    slow_fraction: float = 0.0,
) -> Plan:
    """Draw a plan: poison messages (each poison kind at least twice), ``kills`` worker kills, one
    pause past ``claim_idle_ms``, and one restart of each server in ``servers`` ("redis",
    "engine", "postgres"), all within ``window_s`` seconds; ``slow_fraction`` of the healthy
    messages are "slow". The scenario name is mixed into the seed so that scenarios of one run
    differ."""
    rng = random.Random(f"{seed}:{scenario}")
    claim_idle_s = claim_idle_ms / 1000

    kinds = ["ok"] * messages
    n_poison = max(6, round(messages * poison_fraction))
    for j, i in enumerate(rng.sample(range(messages), n_poison)):
        kinds[i] = KINDS[1 + j % 3]
    healthy = [i for i, k in enumerate(kinds) if k == "ok"]
    for i in rng.sample(healthy, round(messages * slow_fraction)):
        kinds[i] = "slow"

    busy: dict[int, list[tuple[float, float]]] = {w: [] for w in range(workers)}
    faults: list[Fault] = []

    def book(at_s: float, hold_s: float) -> int | None:
        # A worker with no other episode from a little before ``at_s`` until a little after it
        # is running again, so one fault never lands on a process another fault holds.
        free = [
            w
            for w in range(workers)
            if all(at_s + hold_s + 0.5 < a or at_s > b + 0.5 for a, b in busy[w])
        ]
        if not free:
            return None
        w = rng.choice(free)
        busy[w].append((at_s, at_s + hold_s))
        return w

    latest = window_s - 1.0
    # The pause first, so it always finds a free worker: long enough for the others to see the
    # entries idle (claim_idle_ms) and for their reclaimer to come round (claim_idle_ms / 2).
    hold = claim_idle_s * rng.uniform(2.0, 3.5)
    at = rng.uniform(1.0, max(1.0, latest - hold))
    worker = book(at, hold)
    assert worker is not None
    faults.append(Fault("pause", round(at, 2), round(hold, 2), worker))

    placed = 0
    for _ in range(1000):  # bounded: a crowded window may fit fewer kills than asked
        if placed == kills:
            break
        if rng.random() < 0.5:
            hold = rng.uniform(0.0, claim_idle_s * 0.5)  # back before anyone claims its entries
        else:
            hold = rng.uniform(claim_idle_s * 1.5, claim_idle_s * 3.0)  # the others took over
        at = rng.uniform(0.5, max(0.5, latest - hold))
        worker = book(at, hold)
        if worker is None:
            continue
        in_batch = round(rng.uniform(0.0, 0.15), 3) if rng.random() < 0.75 else None
        faults.append(Fault("kill", round(at, 2), round(hold, 2), worker, "", in_batch))
        placed += 1

    for server in servers:
        signals = ("SIGKILL", "SIGTERM") if server != "postgres" else ("SIGQUIT", "SIGINT")
        hold = rng.uniform(0.0, 1.5)
        at = rng.uniform(1.0, latest - hold)
        faults.append(
            Fault(f"restart_{server}", round(at, 2), round(hold, 2), None, rng.choice(signals))
        )

    faults.sort(key=lambda f: f.at_s)
    return Plan(seed, scenario, tuple(kinds), tuple(faults), window_s)
