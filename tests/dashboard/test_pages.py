"""The overview, workers, throughput and bulk dead-letter pages over HTTP, on a real
redis-server 7.0 and on the embedded engine; login throttling; every page on a real local
Redis Cluster (``redis+cluster://``)."""

from __future__ import annotations

import asyncio
import re
import time
import warnings
from collections.abc import Iterator

import pytest
import structlog

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from streamworker.dashboard import DashboardConfig, create_app
from streamworker.io.keys import consumer_name_key, dead_letter_stream
from streamworker.io.redisio import open_redis
from streamworker.runtime.names import ConsumerNames
from tests.dashboard.conftest import HOSTILE, Scene, Store, build_scene, dead_letter
from tests.dashboard.test_http import BASE, ORIGIN, TOKEN, cell, client_for, csrf_of, login
from tests.support.cluster import LocalCluster

WAIT_S = 30.0


@pytest.fixture
def dash(store: Store, scene: Scene) -> Iterator[TestClient]:
    with client_for(store) as client:
        login(client)
        yield client


def _rows(html: str, attr: str) -> list[str]:
    return re.findall(rf'<tr [^>]*{attr}="([^"]*)"', html)


def test_the_overview_shows_work_left_as_lag_plus_pending(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    html = dash.get("/").text
    for raw in store.client.xinfo_groups("orders"):
        name = raw["name"].decode()
        row = f'class="level-[a-z]+" data-stream="orders" data-group="{name}" data-level="[a-z]+"'
        assert cell(html, row, "work-left") == str(raw["lag"] + raw["pending"])
        assert cell(html, row, "pending") == str(raw["pending"])
        assert cell(html, row, "consumers") == str(raw["consumers"])
        dead = store.client.xlen(scene.dlq)
        assert re.search(
            rf'data-group="{name}".*?data-testid="dead-letters"><a [^>]*>{dead}<', html, re.S
        )


def test_the_overview_puts_the_worst_group_first(store: Store) -> None:
    c = store.client
    for stream, backlog in (("calm", 1), ("busy", 50), ("middling", 5)):
        for i in range(backlog):
            c.xadd(stream, {"n": str(i)})
        c.xgroup_create(stream, "g", id="0")
        # A live worker on each (else each group with work left is critical: nobody does it).
        c.xgroup_createconsumer(stream, "g", "w1")
        _beat(store, stream, "g", "w1")
    with client_for(store) as client:
        login(client)
        html = client.get("/?work_left_warn=3&work_left_crit=20").text
    assert _rows(html, "data-stream") == ["busy", "middling", "calm"]
    levels = re.findall(r'data-level="([a-z]+)"', html)
    assert levels == ["crit", "warn", "ok"]


def test_thresholds_set_on_the_page_change_the_grades(dash: TestClient, store: Store) -> None:
    for name in ("c1", "c2"):  # live workers for billing's pending entries
        _beat(store, "orders", "billing", name)
    relaxed = dash.get(
        "/?dead_letters_warn=1000&dead_letters_crit=2000&work_left_warn=1000"
        "&work_left_crit=2000&oldest_pending_s_warn=100000"
        "&oldest_pending_s_crit=200000"
    ).text
    assert set(re.findall(r'data-level="([a-z]+)"', relaxed)) == {"ok"}
    strict = dash.get("/?dead_letters_warn=1&dead_letters_crit=2").text
    assert "crit" in set(re.findall(r'data-level="([a-z]+)"', strict))


def test_a_bad_threshold_is_a_400_with_the_reason(dash: TestClient) -> None:
    r = dash.get("/?work_left_warn=50&work_left_crit=10")
    assert r.status_code == 400
    assert "WARN &lt;= CRIT" in r.text


def test_the_overview_shows_rates_once_the_sampler_has_two_samples(
    store: Store, scene: Scene
) -> None:
    app = create_app(
        DashboardConfig(redis_url=store.url, allowed_hosts=("127.0.0.1",), sample_interval_s=0.5)
    )
    with TestClient(app, base_url=BASE) as client:
        deadline = time.monotonic() + WAIT_S
        while True:
            for i in range(5):
                store.client.xadd("orders", {"n": f"r{i}"})
            html = client.get("/").text
            row = (
                'class="level-[a-z]+" data-stream="orders" data-group="billing" data-level="[a-z]+"'
            )
            shown = cell(html, row, "in")
            if shown.endswith("/s") and shown != "0.0/s":
                break
            assert time.monotonic() < deadline, shown
            time.sleep(0.5)


def _beat(store: Store, stream: str, group: str, consumer: str, **kw: object) -> ConsumerNames:
    """A heartbeat record written by the runtime's own ConsumerNames (in a private loop)."""

    async def go() -> ConsumerNames:
        client = open_redis(store.url)
        names = ConsumerNames(
            client,
            consumer,
            [(stream, group)],
            ttl_ms=15_000,
            handlers=["tests.bill", HOSTILE],
            version="9.9.9",
            stats=lambda: {
                "last_batch_at_ms": int(time.time() * 1000),
                "in_flight": 2,
                "processed": 41,
                "failed": 1,
            },
            **kw,  # type: ignore[arg-type]
        )
        await names.acquire()
        await client.aclose()
        return names

    return asyncio.run(go())


def test_the_workers_page_lists_live_workers_and_what_they_hold(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    _beat(store, "orders", "billing", "c1", host="host-a", pid=4242)
    html = dash.get("/workers").text
    assert re.search(r'data-testid="live-count">1<', html)
    assert 'data-worker="host-a:4242"' in html
    assert cell(html, 'data-worker="host-a:4242"', "processed") == "41"
    assert cell(html, 'data-worker="host-a:4242"', "in-flight") == "2"
    assert cell(html, 'data-worker="host-a:4242"', "failed") == "1"
    assert 'data-testid="late"' not in html  # its heartbeat is fresh
    assert "9.9.9" in html
    assert "&lt;script&gt;window.__pwned" in html  # a hostile handler name is text
    assert "<script>window.__pwned" not in html
    # c1 holds 3 entries: shown under the live worker; c2 (2 held) has no heartbeat.
    assert re.search(r'data-consumer="c1">.*?data-testid="pending">3<', html, re.S)
    dead = re.search(r'<tr data-consumer="c2" data-state="([^"]+)"', html)
    assert dead
    assert dead.group(1) == "not running"


def test_a_worker_whose_record_is_deleted_shows_as_stopped(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    _beat(store, "orders", "billing", "c1", host="host-a", pid=4242)
    assert "host-a:4242" in dash.get("/workers").text  # the dashboard sees it alive
    store.client.delete(consumer_name_key("orders", "billing", "c1"))  # a graceful stop
    html = dash.get("/workers").text
    m = re.search(r'<tr data-consumer="c1" data-state="([^"]+)"', html)
    assert m
    assert m.group(1) == "stopped"
    assert "host-a" in html  # its last record is remembered


def test_a_worker_whose_record_expired_shows_as_lost_with_a_claim_link(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    _beat(store, "orders", "billing", "c1", host="host-a", pid=4242)
    _beat(store, "orders", "billing", "c2", host="host-b", pid=7)
    key = consumer_name_key("orders", "billing", "c1")
    store.client.pexpire(key, 300)
    assert "host-a:4242" in dash.get("/workers").text  # seen with 300 ms left to live
    time.sleep(1.6)
    html = dash.get("/workers").text
    m = re.search(r'<tr data-consumer="c1" data-state="([^"]+)">(.*?)</tr>', html, re.S)
    assert m
    assert m.group(1) == "lost"
    # the claim link names a live consumer of the same group as the target
    assert "action=claim" in m.group(2)
    assert "consumer=c1" in m.group(2)
    assert "target=c2" in m.group(2)


def test_the_throughput_page_draws_rates_with_a_time_axis_and_units(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    html = dash.get("/throughput?stream=orders").text
    assert "entries/s" in html
    assert "times in UTC" in html
    assert html.count('data-testid="chart"') == 4  # rates and pending/lag for billing and audit
    assert re.search(r'data-testid="x-tick">\d\d:\d\d', html)
    assert dash.get("/throughput?stream=orders&minutes=7").status_code == 404


def test_the_throughput_page_refreshes_once_a_second_for_a_live_view(
    dash: TestClient, scene: Scene
) -> None:
    html = dash.get("/throughput?stream=orders").text
    assert 'data-refresh-ms="1000"' in html
    assert 'data-refresh-ms="3000"' in dash.get("/").text  # the other pages: --refresh-ms


def test_the_stream_chart_draws_from_the_first_sample(dash: TestClient, scene: Scene) -> None:
    html = dash.get("/stream?stream=orders").text
    assert 'data-samples="1"' in html or 'data-samples="2"' in html
    assert re.search(r'<circle class="pending" cx="[\d.]+" cy="[\d.]+" r="3"/>', html)


def test_dead_letters_filter_by_error_text_and_handler(dash: TestClient, scene: Scene) -> None:
    html = dash.get("/dlq", params={"key": scene.dlq, "error": "valueerror"}).text
    assert len(re.findall(r"<tr data-id=", html)) == 2
    html = dash.get("/dlq", params={"key": scene.dlq, "error": "KeyError"}).text
    assert len(re.findall(r"<tr data-id=", html)) == 1
    html = dash.get("/dlq", params={"key": scene.dlq, "handler": "other.handler"}).text
    assert "No dead letters match" in html
    html = dash.get("/dlq", params={"key": scene.dlq, "older_than_s": "3600"}).text
    assert "No dead letters match" in html  # all made just now


def _wait_job(dash: TestClient, job_url: str, state: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while True:
        html = dash.get(job_url).text
        m = re.search(r'data-testid="state">([a-z]+)<', html)
        if m and m.group(1) == state:
            return html
        assert time.monotonic() < deadline, html[-2000:]
        time.sleep(0.1)


def test_bulk_replay_of_a_filtered_set_confirms_the_count_and_runs_in_the_background(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    length = store.client.xlen("orders")
    confirm = "/confirm?" + "action=bulk-replay&key=%7Borders%7D%3Adlq&error=ValueError"
    page = dash.get(confirm).text
    assert re.search(r'data-testid="match-count">2<', page)
    csrf = csrf_of(dash, confirm)
    with structlog.testing.capture_logs() as logs:
        r = dash.post(
            "/actions/bulk-replay",
            data={
                "csrf": csrf,
                "confirm": "yes",
                "key": scene.dlq,
                "error": "ValueError",
                "expected": "2",
            },
            headers=ORIGIN,
        )
        assert r.status_code == 303
        job_url = r.headers["location"]
        html = _wait_job(dash, job_url, "finished")
    assert cell_text(html, "done") == "2"
    assert store.client.xlen(scene.dlq) == 1  # the KeyError one stays
    assert store.client.xlen("orders") == length + 2
    events = [e["event"] for e in logs]
    assert "dashboard_bulk_started" in events
    assert "dashboard_bulk_finished" in events


def cell_text(html: str, testid: str) -> str:
    m = re.search(rf'data-testid="{testid}">([^<]*)<', html)
    assert m, testid
    return m.group(1)


def test_a_bulk_purge_stopped_midway_resumes_and_finishes_the_set(
    store: Store, scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamworker.dashboard import bulk

    monkeypatch.setattr(bulk, "JOB_PAGE", 10)
    c = store.client
    for i in range(300):
        entry = c.xadd("orders", {"n": f"p{i}"})
        c.xreadgroup("billing", "c9", {"orders": ">"}, count=1)
        dead_letter(c, "orders", "billing", "c9", entry, "TimeoutError: slow")
    dlq = dead_letter_stream("orders")
    before = c.xlen(dlq)
    app = create_app(
        DashboardConfig(
            redis_url=store.url,
            token=TOKEN,
            allow_actions=True,
            allowed_hosts=("127.0.0.1",),
            bulk_page_pause_s=0.3,  # 30 pages of 10: the stop lands midway
        )
    )
    with TestClient(app, base_url=BASE, follow_redirects=False) as dash:
        login(dash)
        csrf = csrf_of(dash, "/confirm?action=bulk-purge&key=%7Borders%7D%3Adlq&error=timeout")
        form = {"csrf": csrf, "confirm": "yes", "key": dlq, "error": "timeout", "expected": "300"}
        r = dash.post("/actions/bulk-purge", data=form, headers=ORIGIN)
        job_url = r.headers["location"]
        job_id = job_url.split("=")[1]
        stop = dash.post(
            "/actions/job-stop",
            data={"csrf": csrf, "confirm": "yes", "job": job_id},
            headers=ORIGIN,
        )
        assert stop.status_code == 303
        html = _wait_job(dash, job_url, "stopped")
        done_at_stop = int(cell_text(html, "done"))
        assert done_at_stop < 300
        assert c.xlen(dlq) == before - done_at_stop  # nothing deleted beyond what it counted
        dash.post(
            "/actions/job-resume",
            data={"csrf": csrf, "confirm": "yes", "job": job_id},
            headers=ORIGIN,
        )
        html = _wait_job(dash, job_url, "finished")
        assert int(cell_text(html, "done")) == 300
    assert c.xlen(dlq) == before - 300  # the three older dead letters stay


def test_a_bulk_action_without_the_csrf_token_is_refused(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    r = dash.post(
        "/actions/bulk-purge",
        data={"csrf": "guess", "confirm": "yes", "key": scene.dlq, "expected": "3"},
        headers=ORIGIN,
    )
    assert r.status_code == 403
    assert store.client.xlen(scene.dlq) == 3


def test_login_attempts_beyond_the_per_client_limit_are_refused_and_logged(
    store: Store,
) -> None:
    app = create_app(
        DashboardConfig(
            redis_url=store.url,
            token=TOKEN,
            allowed_hosts=("127.0.0.1",),
            login_per_client=2,
            login_overall=100,
        )
    )
    with (
        TestClient(app, base_url=BASE, follow_redirects=False) as client,
        structlog.testing.capture_logs() as logs,
    ):
        codes = [
            client.post("/login", data={"token": "wrong-token-x"}, headers=ORIGIN).status_code
            for _ in range(3)
        ]
        # even the right token is refused while the address is throttled
        right = client.post("/login", data={"token": TOKEN}, headers=ORIGIN)
    assert codes == [403, 403, 429]
    assert right.status_code == 429
    assert int(right.headers["retry-after"]) >= 1
    throttled = [e for e in logs if e["event"] == "dashboard_login_throttled"]
    assert throttled
    assert throttled[0]["limit"] == "client"


def test_parallel_login_attempts_count_against_the_global_limit(store: Store) -> None:
    app = create_app(
        DashboardConfig(
            redis_url=store.url,
            token=TOKEN,
            allowed_hosts=("127.0.0.1",),
            login_per_client=100,
            login_overall=3,
        )
    )

    async def burst() -> list[int]:
        import httpx

        transport = httpx.ASGITransport(app=app, client=("10.1.1.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as c:
            rs = await asyncio.gather(
                *(
                    c.post("/login", data={"token": f"wrong-{i}-xxxx"}, headers=ORIGIN)
                    for i in range(8)
                )
            )
        return sorted(r.status_code for r in rs)

    started = time.monotonic()
    codes = asyncio.run(burst())
    assert codes == [403] * 3 + [429] * 5
    assert time.monotonic() - started < 5  # the refused ones did not wait their second


# --- Redis Cluster -------------------------------------------------------------------------------


@pytest.fixture
def cluster_store(redis_cluster: LocalCluster) -> Iterator[Store]:
    client = redis_cluster.client()
    client.flushall(target_nodes=client.PRIMARIES)  # type: ignore[attr-defined]
    yield Store("cluster", redis_cluster.url, client)  # type: ignore[arg-type]
    client.close()


@pytest.mark.slow
def test_every_page_works_on_redis_cluster(cluster_store: Store) -> None:
    c = cluster_store.client
    scene = build_scene(c)
    # Streams in other slots, so SCAN has to visit every master.
    for name in ("alpha", "beta", "gamma", "delta", "{epsilon}"):
        c.xadd(name, {"n": "1"})
    names_on = {c.keyslot(n) for n in ("alpha", "beta", "gamma", "delta", "orders")}  # type: ignore[attr-defined]
    assert len(names_on) > 1
    _beat(cluster_store, "orders", "billing", "c1", host="host-a", pid=1)
    with client_for(cluster_store) as dash:
        login(dash)
        pages = [
            "/",
            "/streams",
            "/workers",
            "/jobs",
            "/stream?stream=orders",
            "/throughput?stream=orders",
            "/entries?stream=orders",
            "/group?stream=orders&group=billing",
            f"/dlq?key={scene.dlq}",
            f"/dlq?key={scene.dlq}&error=value",
            f"/dead-letter?key={scene.dlq}&id={scene.dead[0].decode()}",
            "/confirm?action=bulk-replay&key=%7Borders%7D%3Adlq&error=ValueError",
        ]
        for path in pages:
            r = dash.get(path)
            assert r.status_code == 200, (path, r.text[-500:])
        listing = dash.get("/streams").text
        assert set(_rows(listing, "data-stream")) == {
            "orders",
            scene.dlq,
            "alpha",
            "beta",
            "gamma",
            "delta",
            "{epsilon}",
        }
        assert "host-a" in dash.get("/workers").text
        csrf = csrf_of(dash, "/confirm?action=bulk-replay&key=%7Borders%7D%3Adlq&error=Value")
        r = dash.post(
            "/actions/bulk-replay",
            data={
                "csrf": csrf,
                "confirm": "yes",
                "key": scene.dlq,
                "error": "ValueError",
                "expected": "2",
            },
            headers=ORIGIN,
        )
        _wait_job(dash, r.headers["location"], "finished")
    assert c.xlen(scene.dlq) == 1


def test_a_filtered_dead_letter_list_reads_a_bounded_amount_per_page(
    store: Store, scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamworker.dashboard import bulk

    monkeypatch.setattr(bulk, "JOB_PAGE", 10)
    monkeypatch.setattr(bulk, "MAX_SCAN_PER_PAGE", 100)
    c = store.client
    for i in range(250):  # newer than the scene's three, none matching
        entry = c.xadd("orders", {"n": f"q{i}"})
        c.xreadgroup("billing", "c9", {"orders": ">"}, count=1)
        dead_letter(c, "orders", "billing", "c9", entry, "TimeoutError: slow")
    with client_for(store) as dash:
        login(dash)
        found: list[str] = []
        url: str | None = "/dlq?key=%7Borders%7D%3Adlq&error=ValueError"
        pages = 0
        while url:
            html = dash.get(url).text
            pages += 1
            found += re.findall(r'<tr data-id="([^"]+)"', html)
            scanned = re.search(r"looked at (\d+) on this page", html)
            assert scanned
            assert int(scanned.group(1)) <= 100
            nxt = re.search(r'data-testid="next" href="([^"]+)"', html)
            url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert pages >= 3  # 253 dead letters, at most 100 read per page
    assert sorted(found) == sorted(d.decode() for d in scene.dead[:2])
