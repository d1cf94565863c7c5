"""The dashboard in a real headless Chromium (Debian's), driven by Playwright, against a
redis-server whose streams, groups, pending entries and dead letters were made by real
``streamworker run`` processes. Takes screenshots of the main pages: into a temp dir, or into
docs/screenshots/ (docs/dashboard.md's pictures) with ``STREAMWORKER_UPDATE_SCREENSHOTS=1``."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from playwright.sync_api import Browser, Page, expect, sync_playwright

from streamworker.io.keys import consumer_name_key
from streamworker.io.redisio import open_redis
from streamworker.runtime.names import ConsumerNames
from tests.dashboard.conftest import BINARY, HOSTILE, HUGE
from tests.support.proc import ROOT, streamworker, wait_for
from tests.support.servers import RedisServer, free_port, missing_service

pytestmark = pytest.mark.slow

TOKEN = "browser-test-token"
SHOTS = ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_S = 60.0  # generous: the machine may be loaded


def _stop(proc: subprocess.Popen[bytes]) -> str:
    """Stop ``proc``; return the end of its stderr (its JSON logs), for diagnostics."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    tail = proc.stderr.read()[-3000:].decode(errors="replace") if proc.stderr else ""
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return f"--- {' '.join(map(str, proc.args))[-120:]} (exit {proc.returncode})\n{tail}"


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@dataclass
class Live:
    """A dashboard subprocess over data made by real workers; the billing worker keeps running."""

    base: str
    client: redis.Redis
    dlq: str
    out: Path
    healed: Path


@pytest.fixture(scope="module")
def live(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    redis_server.client().flushall()
    tmp = tmp_path_factory.mktemp("dashboard")
    url = redis_server.url
    client = redis.Redis.from_url(url)
    messages: list[dict[str, str | bytes]] = [{"n": str(n), "action": "ok"} for n in (1, 2, 3, 4)]
    messages += [
        {"n": "5", "action": "poison", "note": HOSTILE},
        {"n": "6", "action": "poison"},
        {"n": "7", "blob": BINARY},  # not UTF-8: the worker dead-letters it at once
        {"n": "8", "big": HUGE},
    ]
    for m in messages:
        client.xadd("orders", m)  # type: ignore[arg-type]
    env = {"DASH_OUT": str(tmp / "out.txt"), "DASH_HEALED": str(tmp / "healed")}
    procs: list[subprocess.Popen[bytes]] = []
    ready = False
    try:
        target = "tests.dashboard.worker_app"
        procs.append(
            streamworker(
                "run", f"{target}:app", "--redis-url", url, "--consumer", "billing-1", env=env
            )
        )
        stuck = streamworker(
            "run", f"{target}:stuck", "--redis-url", url, "--consumer", "auditor-1", env=env
        )
        procs.append(stuck)
        dlq = "{orders}:dlq"
        wait_for(lambda: client.xlen(dlq) == 3, WAIT_S, "three dead letters")
        wait_for(
            lambda: sorted(_lines(tmp / "out.txt")) == ["1", "2", "3", "4", "8"],
            WAIT_S,
            "the good orders billed",
        )

        def audit_pending() -> int:
            try:
                return int(client.xpending("orders", "audit")["pending"])
            except redis.ResponseError:  # the group does not exist yet
                return 0

        wait_for(lambda: audit_pending() == 8, WAIT_S, "the audit worker holding every order")
        stuck.kill()  # a dead consumer, its pending entries left behind
        stuck.wait(10)
        port = free_port()
        procs.append(
            streamworker(
                "dashboard",
                "--redis-url",
                url,
                "--port",
                str(port),
                "--allow-actions",
                "--token",
                TOKEN,
                "--refresh-ms",
                "1000",
                "--sample-interval-s",
                "1",
            )
        )
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                with urllib.request.urlopen(base + "/login", timeout=5) as r:
                    return bool(r.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        wait_for(up, WAIT_S, "the dashboard answering")
        _hostile_worker(url)
        ready = True
        yield Live(base, client, dlq, tmp / "out.txt", tmp / "healed")
    finally:
        tails = [_stop(proc) for proc in procs]
        client.close()
        if not ready:  # pytest shows this output with the failed set-up
            print("\n".join(tails))


HOSTILE_STREAM = '<img src=x onerror="window.__pwned = 1">'
HOSTILE_GROUP = "<script>window.__pwned = 1</script>"
HOSTILE_CONSUMER = '"><svg onload="window.__pwned = 1">'


def _hostile_worker(url: str) -> None:
    """A stream, group and consumer with hostile names, and a live heartbeat record for the
    consumer written by the runtime's own ConsumerNames (hostile handler name too)."""
    client = redis.Redis.from_url(url)
    client.xadd(HOSTILE_STREAM, {"n": "1"})
    client.xgroup_create(HOSTILE_STREAM, HOSTILE_GROUP, id="0")
    client.xreadgroup(HOSTILE_GROUP, HOSTILE_CONSUMER, {HOSTILE_STREAM: ">"})
    client.close()

    async def beat() -> None:
        aclient = open_redis(url)
        names = ConsumerNames(
            aclient,
            HOSTILE_CONSUMER,
            [(HOSTILE_STREAM, HOSTILE_GROUP)],
            ttl_ms=3_600_000,
            handlers=[HOSTILE],
            version=HOSTILE,
            host="hostile-host",
            pid=31337,
        )
        await names.acquire()
        await aclient.aclose()

    # In a thread of its own: Playwright's sync API keeps an event loop in this one.
    worker = threading.Thread(target=asyncio.run, args=(beat(),))
    worker.start()
    worker.join(WAIT_S)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = shutil.which("chromium")
    if path is None:
        missing_service("chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser, live: Live) -> Iterator[Page]:
    """A logged-in page (a fresh browser context: its own cookies)."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(WAIT_S * 1000)
    pg = context.new_page()
    pg.goto(live.base + "/")
    expect(pg).to_have_url(f"{live.base}/login?next=%2F")
    pg.fill("input[name=token]", TOKEN)
    pg.click("button[type=submit]")
    expect(
        pg.get_by_role("heading", name="Overview: work left per group, worst first")
    ).to_be_visible()
    yield pg
    context.close()


@pytest.fixture(scope="session")
def shots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("STREAMWORKER_UPDATE_SCREENSHOTS") == "1":
        return SHOTS
    return tmp_path_factory.mktemp("screenshots")


def shot(page: Page, name: str, where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000


def no_script_ran(page: Page) -> None:
    assert page.evaluate("window.__pwned === undefined")
    assert page.locator("img[src=x]").count() == 0
    assert page.locator("script:not([src])").count() == 0


def test_streams_page_shows_the_lengths(page: Page, live: Live, shots_dir: Path) -> None:
    page.goto(live.base + "/streams")
    row = page.locator('tr[data-stream="orders"]')
    expect(row.get_by_test_id("length")).to_have_text(str(live.client.xlen("orders")))
    dlq_row = page.locator(f'tr[data-stream="{live.dlq}"]')
    expect(dlq_row.get_by_test_id("length")).to_have_text(str(live.client.xlen(live.dlq)))
    shot(page, "streams", shots_dir)


def test_stream_page_numbers_equal_xinfo_groups(page: Page, live: Live) -> None:
    page.goto(live.base + "/streams")
    page.click('a:text-is("orders")')
    expect(page.get_by_role("heading", name="Stream orders")).to_be_visible()
    for g in live.client.xinfo_groups("orders"):
        row = page.locator(f'tr[data-group="{g["name"].decode()}"]')
        expect(row.get_by_test_id("pending")).to_have_text(str(g["pending"]))
        expect(row.get_by_test_id("lag")).to_have_text(str(g["lag"]))
        expect(row.get_by_test_id("last-delivered")).to_have_text(g["last-delivered-id"].decode())
    expect(page.get_by_test_id("chart").first).to_be_visible()


def test_group_page_numbers_equal_xpending(page: Page, live: Live, shots_dir: Path) -> None:
    page.goto(live.base + "/group?stream=orders&group=audit")
    summary = live.client.xpending("orders", "audit")
    expect(page.get_by_test_id("pending").first).to_have_text(str(summary["pending"]))
    for c in summary["consumers"]:
        row = page.locator(f'tr[data-consumer="{c["name"].decode()}"]')
        expect(row.get_by_test_id("pending")).to_have_text(str(c["pending"]))
    for entry in live.client.xpending_range("orders", "audit", "-", "+", 50):
        row = page.locator(f'tr[data-id="{entry["message_id"].decode()}"]')
        expect(row.get_by_test_id("deliveries")).to_have_text(str(entry["times_delivered"]))
    shot(page, "group", shots_dir)


def test_a_script_field_renders_as_text(page: Page, live: Live) -> None:
    page.goto(f"{live.base}/dlq?key=%7Borders%7D%3Adlq")
    expect(page.get_by_test_id("dlq-length")).to_have_text(str(live.client.xlen(live.dlq)))
    expect(page.locator("dd", has_text="<script>window.__pwned = 1</script>").first).to_be_visible()
    no_script_ran(page)
    page.goto(live.base + "/entries?stream=orders")
    expect(page.locator("dd", has_text="<script>window.__pwned").first).to_be_visible()
    no_script_ran(page)


def test_replay_a_dead_letter_with_a_click_and_see_it_processed(
    page: Page, live: Live, shots_dir: Path
) -> None:
    page.goto(f"{live.base}/dlq?key=%7Borders%7D%3Adlq")
    shot(page, "dead-letters", shots_dir)
    before = live.client.xlen(live.dlq)
    live.healed.touch()  # the handler's bug is fixed: order 5 will go through now
    row = page.locator("tr", has_text="card declined for order 5")
    row.get_by_test_id("replay").click()
    expect(page.get_by_test_id("confirm")).to_be_visible()
    shot(page, "confirm-replay", shots_dir)
    page.get_by_test_id("confirm-button").click()
    expect(page.get_by_test_id("notice")).to_contain_text("replayed dead letter")
    wait_for(lambda: "5" in _lines(live.out), WAIT_S, "the replayed order billed")
    assert live.client.xlen(live.dlq) == before - 1
    expect(page.get_by_test_id("dlq-length")).to_have_text(str(before - 1))
    no_script_ran(page)


def test_live_refresh_shows_new_entries_without_reloading(page: Page, live: Live) -> None:
    page.goto(live.base + "/streams")
    page.click('a:text-is("orders")')
    length = page.locator("#live").get_by_test_id("length")
    expect(length).to_have_text(str(live.client.xlen("orders")))
    page.evaluate("window.__sameDocument = true")
    live.client.xadd("orders", {"n": "9"})
    expect(length).to_have_text(str(live.client.xlen("orders")))
    assert page.evaluate("window.__sameDocument === true")  # updated in place, not reloaded


def test_an_action_without_the_token_is_refused(browser: Browser, live: Live) -> None:
    context = browser.new_context()
    try:
        first = live.client.xrange(live.dlq, count=1)[0][0].decode()
        before = live.client.xlen(live.dlq)
        r = context.request.post(
            live.base + "/actions/purge",
            form={"csrf": "guess", "confirm": "yes", "key": live.dlq, "id": first},
            headers={"Origin": live.base},
        )
        assert r.status == 403
        assert "refused" in r.text()
        assert live.client.xlen(live.dlq) == before
    finally:
        context.close()


def test_the_chart_fills_with_samples(page: Page, live: Live, shots_dir: Path) -> None:
    page.goto(live.base + "/stream?stream=orders")
    # The page and the background sampler (every second here) add samples; the refresh shows them.
    # Polled from here: wait_for_function evaluates a string, which the page's CSP (no
    # 'unsafe-eval') refuses as soon as Playwright has to poll it.
    chart = page.locator("[data-testid=chart]").first
    wait_for(
        lambda: int(chart.get_attribute("data-samples") or 0) >= 3,
        WAIT_S,
        "three samples in the chart",
    )
    expect(page.locator("[data-testid=chart] path.pending").first).to_be_attached()
    shot(page, "stream", shots_dir)


def test_claim_a_dead_consumers_entries_with_a_click(page: Page, live: Live) -> None:
    page.goto(live.base + "/group?stream=orders&group=audit")
    held = int(live.client.xpending("orders", "audit")["pending"])
    page.locator('tr[data-consumer="auditor-1"]').get_by_role("link", name="claim…").click()
    _claim_everything_to(page, "auditor-2", held)
    expect(page.get_by_test_id("notice")).to_contain_text(f"claimed {held} entries")
    owners = {
        c["name"].decode(): int(c["pending"])
        for c in live.client.xpending("orders", "audit")["consumers"]
    }
    assert owners == {"auditor-2": held}
    row = page.locator('tr[data-consumer="auditor-2"]')
    expect(row.get_by_test_id("pending")).to_have_text(str(held))


def _claim_everything_to(page: Page, target: str, held: int) -> None:
    """On a claim's confirmation: a minimum idle time of 0, ``target`` (a consumer that does
    not exist yet, so creating it is confirmed explicitly), check the count, claim."""
    page.get_by_test_id("target").fill(target)
    page.get_by_test_id("min-idle").fill("0")
    page.get_by_test_id("check").click()
    expect(page.get_by_test_id("moving")).to_have_text(str(held))
    expect(page.get_by_test_id("warn-target-new")).to_be_visible()
    page.get_by_test_id("create-target").check()
    page.get_by_test_id("confirm-button").click()


LEVELS = {"ok": 0, "warn": 1, "crit": 2}


def test_the_overview_puts_the_worst_group_first_and_matches_xinfo(
    page: Page, live: Live, shots_dir: Path
) -> None:
    page.goto(live.base + "/")
    rows = page.locator("[data-testid=overview] tbody tr")
    expect(rows.first).to_be_visible()
    levels = [LEVELS[rows.nth(i).get_attribute("data-level") or "ok"] for i in range(rows.count())]
    assert levels == sorted(levels, reverse=True)
    for g in live.client.xinfo_groups("orders"):
        name = g["name"].decode()
        row = page.locator(f'tr[data-stream="orders"][data-group="{name}"]')
        expect(row.get_by_test_id("work-left")).to_have_text(str(g["lag"] + g["pending"]))
    hostile = page.locator("tr", has_text=HOSTILE_STREAM)
    expect(hostile.first).to_be_visible()  # the name shows as text
    expect(hostile.first).to_contain_text(HOSTILE_GROUP)
    no_script_ran(page)
    shot(page, "overview", shots_dir)


def test_the_workers_page_shows_the_live_worker_and_the_dead_consumer(
    page: Page, live: Live, shots_dir: Path
) -> None:
    page.goto(live.base + "/workers")
    billing = page.locator("[data-testid=workers] tr", has_text="billing-1")
    expect(billing).to_be_visible()
    expect(billing).to_contain_text("tests.dashboard.worker_app")
    hostile = page.locator("[data-testid=workers] tr", has_text="hostile-host")
    expect(hostile).to_contain_text(HOSTILE_CONSUMER)
    expect(hostile).to_contain_text(HOSTILE)
    no_script_ran(page)
    # The audit consumers hold entries and have no live process: offered for a claim.
    held = {
        c["name"].decode(): int(c["pending"])
        for c in live.client.xpending("orders", "audit")["consumers"]
    }
    source = max(held, key=lambda n: held[n])
    dead = page.locator(f'[data-testid=dead-workers] tr[data-consumer="{source}"]')
    expect(dead.get_by_test_id("pending")).to_have_text(str(held[source]))
    shot(page, "workers", shots_dir)
    dead.get_by_test_id("claim").click()
    _claim_everything_to(page, "auditor-9", held[source])
    expect(page.get_by_test_id("notice")).to_contain_text(f"claimed {held[source]} entries")
    owners = {
        c["name"].decode(): int(c["pending"])
        for c in live.client.xpending("orders", "audit")["consumers"]
    }
    assert owners.get("auditor-9") == held[source]


def test_the_throughput_page_charts_rates_with_time_axes(
    page: Page, live: Live, shots_dir: Path
) -> None:
    for i in range(20):
        live.client.xadd("orders", {"n": f"t{i}", "action": "ok"})
    page.goto(live.base + "/throughput?stream=orders&minutes=5")
    chart = page.locator("section[data-group=billing] [data-testid=chart]").first
    wait_for(
        lambda: int(chart.get_attribute("data-samples") or 0) >= 3,
        WAIT_S,
        "three rate points in the chart",
    )
    expect(chart.locator("path.added")).to_be_attached()
    expect(chart.get_by_test_id("x-tick").first).to_have_text(re.compile(r"\d\d:\d\d"))
    expect(chart).to_contain_text("entries/s")
    page.goto(live.base + "/throughput?stream=" + urllib.parse.quote(HOSTILE_STREAM))
    expect(page.locator("h2", has_text=HOSTILE_GROUP)).to_be_visible()
    no_script_ran(page)
    page.goto(live.base + "/throughput?stream=orders&minutes=5")
    shot(page, "throughput", shots_dir)


def test_bulk_replay_of_the_filtered_dead_letters_with_progress(
    page: Page, live: Live, shots_dir: Path
) -> None:
    live.healed.touch()  # the bug is fixed: replayed poison orders go through
    page.goto(f"{live.base}/dlq?key=%7Borders%7D%3Adlq")
    page.fill("input[name=error]", "card declined")
    page.get_by_test_id("apply-filter").click()
    expect(page.get_by_test_id("filter-summary")).to_contain_text("card declined")
    matching = page.locator("[data-testid=dead-letters] tbody tr").count()
    assert matching >= 1
    page.get_by_test_id("bulk-replay").click()
    expect(page.get_by_test_id("match-count")).to_have_text(str(matching))
    shot(page, "bulk-confirm", shots_dir)
    before = live.client.xlen(live.dlq)
    page.get_by_test_id("confirm-button").click()
    expect(page.get_by_test_id("notice")).to_contain_text("started job")
    expect(page.get_by_test_id("state")).to_have_text("finished")  # the live refresh shows it
    expect(page.get_by_test_id("done")).to_have_text(str(matching))
    assert live.client.xlen(live.dlq) == before - matching
    wait_for(lambda: "6" in _lines(live.out), WAIT_S, "the replayed order 6 billed")
    shot(page, "bulk-job", shots_dir)


# --- #34: what the operator at 3 a.m. relies on -------------------------------------------------


def _csrf(page: Page, live: Live) -> str:
    """The session's CSRF token, from a real confirmation page."""
    first = live.client.xrange(live.dlq, count=1)[0][0].decode()
    page.goto(f"{live.base}/confirm?action=purge&key=%7Borders%7D%3Adlq&id={first}")
    return page.locator("input[name=csrf]").input_value()


def test_the_dashboard_never_purges_a_live_stream(page: Page, live: Live) -> None:
    page.goto(live.base + "/dlq?key=orders")
    expect(page.get_by_test_id("error")).to_contain_text("not a streamworker dead letter")
    expect(page.get_by_test_id("purge")).to_have_count(0)
    length = live.client.xlen("orders")
    newest = live.client.xrevrange("orders", count=1)[0][0].decode()
    csrf = _csrf(page, live)
    form = {"csrf": csrf, "confirm": "yes", "key": "orders", "id": newest}
    r = page.request.post(live.base + "/actions/purge", form=form, headers={"Origin": live.base})
    assert "refused to purge" in r.text()  # the page it is sent back to says so
    bulk = {"csrf": csrf, "confirm": "yes", "key": "orders", "expected": str(length)}
    page.request.post(live.base + "/actions/bulk-purge", form=bulk, headers={"Origin": live.base})
    assert live.client.xlen("orders") == length


def test_a_group_whose_only_consumer_died_is_critical(
    page: Page, live: Live, shots_dir: Path
) -> None:
    # The audit worker was killed holding entries: once its name record expires, no consumer
    # of the group is live (the live refresh shows it), whatever the thresholds.
    page.goto(live.base + "/?work_left_warn=100000&work_left_crit=200000")
    row = page.locator('tr[data-stream="orders"][data-group="audit"]')
    expect(row).to_have_attribute("data-level", "crit", timeout=WAIT_S * 1000)
    expect(row.get_by_test_id("problem").filter(has_text="no live consumer")).to_have_count(1)
    expect(row.get_by_test_id("live-consumers")).to_have_text("0")
    billing = page.locator('tr[data-stream="orders"][data-group="billing"]')
    expect(billing.get_by_test_id("live-consumers")).to_have_text("1")  # billing-1 runs
    shot(page, "overview-crit", shots_dir)


def test_a_failed_refresh_shows_a_banner_with_the_time_of_the_last_data(
    browser: Browser, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis").start()
    port = free_port()
    proc = streamworker(
        "dashboard", "--redis-url", server.url, "--port", str(port), "--refresh-ms", "500"
    )
    context = browser.new_context()
    context.set_default_timeout(WAIT_S * 1000)
    try:
        server.client().xadd("orders", {"n": "1"})
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(base + "/streams"), WAIT_S, "the dashboard answering")
        pg = context.new_page()
        pg.goto(base + "/streams")
        expect(pg.locator('tr[data-stream="orders"]')).to_be_visible()
        expect(pg.get_by_test_id("stale")).to_be_hidden()
        server.stop()  # Redis gone
        banner = pg.get_by_test_id("stale")
        expect(banner).to_be_visible(timeout=WAIT_S * 1000)
        expect(banner).to_contain_text("cannot reach Redis")
        expect(pg.locator("#stale-at")).to_have_text(re.compile(r"\d"))
        expect(pg.locator("#live")).to_have_class(re.compile("stale-data"))
        server.start()  # back: the banner goes
        expect(banner).to_be_hidden(timeout=WAIT_S * 1000)
        expect(pg.locator("#live")).not_to_have_class(re.compile("stale-data"))
    finally:
        context.close()
        _stop(proc)
        server.stop()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def test_a_restarted_dashboard_shows_dead_consumers_from_what_redis_holds(
    browser: Browser, live: Live
) -> None:
    key = consumer_name_key("orders", "audit", "auditor-1")
    wait_for(lambda: not live.client.exists(key), WAIT_S, "the killed worker's record expiring")
    port = free_port()
    url = live.client.connection_pool.connection_kwargs
    proc = streamworker(
        "dashboard", "--redis-url", f"redis://127.0.0.1:{url['port']}/0", "--port", str(port)
    )
    context = browser.new_context()
    context.set_default_timeout(WAIT_S * 1000)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(base + "/workers"), WAIT_S, "the new dashboard answering")
        pg = context.new_page()
        pg.goto(base + "/workers")
        row = pg.locator('[data-testid=dead-workers] tr[data-consumer="auditor-1"]')
        expect(row).to_have_attribute("data-state", "not running")
        expect(row.get_by_test_id("last-active")).to_have_text(re.compile(r"ago$"))
        expect(pg.locator("[data-testid=workers] tr", has_text="billing-1")).to_be_visible()
    finally:
        context.close()
        _stop(proc)


def test_the_claim_counts_what_moves_and_defaults_to_the_handlers_claim_idle_ms(
    page: Page, live: Live, shots_dir: Path
) -> None:
    live.client.xadd("orders", {"n": "c1", "action": "ok"})  # read by nobody in audit yet
    held = {
        c["name"].decode(): int(c["pending"])
        for c in live.client.xpending("orders", "audit")["consumers"]
    }
    source = max(held, key=lambda n: held[n])
    page.goto(f"{live.base}/confirm?action=claim&stream=orders&group=audit&consumer={source}")
    # The audit handler's claim_idle_ms is an hour (from its worker's record): nothing moves.
    expect(page.get_by_test_id("min-idle")).to_have_value("3600000")
    expect(page.get_by_test_id("claim-count")).to_contain_text("the handler's claim_idle_ms")
    expect(page.get_by_test_id("moving")).to_have_text("0")
    expect(page.get_by_test_id("no-live")).to_be_visible()  # no audit worker runs
    page.get_by_test_id("target").fill("billing-1")
    page.get_by_test_id("min-idle").fill("0")
    page.get_by_test_id("check").click()
    expect(page.get_by_test_id("moving")).to_have_text(str(held[source]))
    expect(page.get_by_test_id("warn-target-new")).to_be_visible()
    expect(page.get_by_test_id("create-target")).to_be_visible()
    # Without ticking "create", the browser does not send the form, and nothing moved.
    page.get_by_test_id("confirm-button").click()
    expect(page.get_by_test_id("confirm")).to_be_visible()
    assert int(live.client.xpending("orders", "audit")["pending"]) == sum(held.values())
    shot(page, "confirm-claim", shots_dir)


def test_the_dead_letter_page_summarises_and_shows_the_traceback(
    page: Page, live: Live, shots_dir: Path
) -> None:
    page.goto(f"{live.base}/dlq?key=%7Borders%7D%3Adlq")
    reasons = page.get_by_test_id("reason")
    expect(reasons.first).to_be_visible()
    total = sum(int(t) for t in page.get_by_test_id("reason-count").all_inner_texts())
    assert total == live.client.xlen(live.dlq)
    expect(page.get_by_test_id("at").first).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d .* UTC$"))
    expect(page.get_by_test_id("stream-link")).to_have_text("orders")  # the way back
    page.fill("input[name=error]", "not valid UTF-8")
    page.get_by_test_id("apply-filter").click()
    expect(page.get_by_test_id("match-count")).to_have_text("1")
    page.locator("[data-testid=dead-letters] tbody tr a").first.click()
    trace = page.get_by_test_id("traceback")
    expect(trace).to_contain_text("Traceback (most recent call last)")
    expect(trace).to_contain_text("not valid UTF-8")
    shot(page, "dead-letter", shots_dir)


def test_a_replay_keeps_the_filter_and_a_job_counts_replays_that_died_again(
    page: Page, live: Live
) -> None:
    page.goto(f"{live.base}/dlq?key=%7Borders%7D%3Adlq&error=not+valid+UTF-8")
    # The binary order can never be decoded: replayed, it is dead-lettered again at once.
    page.get_by_test_id("bulk-replay").click()
    page.get_by_test_id("confirm-button").click()
    expect(page.get_by_test_id("state")).to_have_text("finished")
    expect(page.get_by_test_id("started")).to_have_text(re.compile(r"UTC$"))
    expect(page.get_by_test_id("ended")).to_contain_text("UTC")
    # the live refresh shows it
    expect(page.get_by_test_id("again")).to_have_text("1", timeout=WAIT_S * 1000)
    page.goto(f"{live.base}/dlq?key=%7Borders%7D%3Adlq&error=not+valid+UTF-8")
    page.get_by_test_id("replay").first.click()
    page.get_by_test_id("confirm-button").click()
    expect(page.get_by_test_id("notice")).to_contain_text("replayed dead letter")
    expect(page.locator("input[name=error]")).to_have_value("not valid UTF-8")
    expect(page.get_by_test_id("filter-summary")).to_be_visible()


def test_charts_put_pending_on_its_own_axis_and_call_dead_letters_the_streams(
    page: Page, live: Live
) -> None:
    page.goto(live.base + "/stream?stream=orders")
    chart = page.get_by_test_id("chart").first
    expect(chart.get_by_test_id("unit2")).to_have_text("lag (entries)")
    expect(chart.get_by_test_id("y2-tick")).to_have_count(5)
    page.goto(live.base + "/throughput?stream=orders&minutes=5")
    rates = page.locator("section[data-group=billing] [data-testid=chart]").first
    expect(rates).to_contain_text("dead-lettered (whole stream, all groups)")
