"""What an operator at 3 a.m. relies on, over HTTP on a real redis-server 7.0 and on the embedded
engine: purge and the dead-letter pages touch dead letters only; the overview grades a stuck
group critical; the claim says what it moves and to whom; the dead-letter pages summarise."""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from streamworker.dashboard.app import pending_chart, rate_chart
from streamworker.dashboard.history import History, Rates
from streamworker.dashboard.overview import Health, _problems
from tests.dashboard.conftest import Scene, Store
from tests.dashboard.test_http import ORIGIN, client_for, csrf_of, login
from tests.dashboard.test_pages import _beat, _wait_job, cell_text

WAIT_S = 30.0


@pytest.fixture
def dash(store: Store, scene: Scene) -> Iterator[TestClient]:
    with client_for(store) as client:
        login(client)
        yield client


def _csrf(dash: TestClient, scene: Scene) -> str:
    return csrf_of(dash, f"/confirm?action=purge&key={scene.dlq}&id={scene.dead[0].decode()}")


def _notice(dash: TestClient, location: str) -> str:
    notices = re.findall(r'data-testid="notice">([^<]*)<', dash.get(location).text)
    assert notices, location
    return " ".join(notices)


# --- 1. purge acts on dead letters only ----------------------------------------------------------


def test_the_dead_letter_page_refuses_a_live_stream(dash: TestClient, scene: Scene) -> None:
    r = dash.get("/dlq?key=orders")
    assert r.status_code == 400
    assert "not a streamworker dead letter" in r.text
    assert "purge…" not in r.text
    assert "{orders}:dlq" in r.text  # where its dead letters are


def test_purging_a_live_entry_is_refused_and_deletes_nothing(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    live = scene.ids[0].decode()
    form = {"csrf": _csrf(dash, scene), "confirm": "yes", "key": "orders", "id": live}
    r = dash.post("/actions/purge", data=form, headers=ORIGIN)
    assert r.status_code == 303
    assert "refused to purge" in _notice(dash, r.headers["location"])
    assert store.client.xrange("orders", min=live, max=live) != []


def test_the_purge_confirmation_refuses_a_live_entry(dash: TestClient, scene: Scene) -> None:
    r = dash.get(f"/confirm?action=purge&key=orders&id={scene.ids[0].decode()}")
    assert r.status_code == 400
    assert "not a streamworker dead letter" in r.text


def test_a_bulk_purge_of_a_live_stream_is_refused_and_deletes_nothing(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    length = store.client.xlen("orders")
    assert dash.get("/confirm?action=bulk-purge&key=orders").status_code == 400
    form = {"csrf": _csrf(dash, scene), "confirm": "yes", "key": "orders", "expected": "9"}
    r = dash.post("/actions/bulk-purge", data=form, headers=ORIGIN)
    assert r.status_code == 303
    assert "not a streamworker dead letter" in _notice(dash, r.headers["location"])
    assert store.client.xlen("orders") == length


def test_a_bulk_purge_skips_an_entry_that_is_not_a_dead_letter(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    stray = store.client.xadd(scene.dlq, {"n": "stray", "note": "added by hand"})
    form = {"csrf": _csrf(dash, scene), "confirm": "yes", "key": scene.dlq, "expected": "3"}
    r = dash.post("/actions/bulk-purge", data=form, headers=ORIGIN)
    html = _wait_job(dash, r.headers["location"], "finished")
    assert cell_text(html, "done") == "3"
    assert cell_text(html, "skipped") == "1"
    assert [i for i, _ in store.client.xrange(scene.dlq)] == [stray]


# --- 8. the overview grades a stuck group critical -----------------------------------------------


def _overview_row(html: str, stream: str, group: str) -> str:
    m = re.search(
        rf'<tr class="level-[a-z]+" data-stream="{re.escape(stream)}" '
        rf'data-group="{re.escape(group)}" data-level="([a-z]+)">(.*?)</tr>',
        html,
        re.S,
    )
    assert m, f"no overview row for {stream}/{group}"
    return m.group(1) + "|" + m.group(2)


RELAXED = (
    "/?dead_letters_warn=1000&dead_letters_crit=2000&work_left_warn=1000&work_left_crit=2000"
    "&oldest_pending_s_warn=100000&oldest_pending_s_crit=200000"
)


def test_a_group_with_work_left_and_no_live_consumer_is_critical(
    dash: TestClient, store: Store
) -> None:
    # billing's consumers hold entries, but no worker of theirs is running (no name record).
    row = _overview_row(dash.get(RELAXED).text, "orders", "billing")
    assert row.startswith("crit|")
    assert "no live consumer" in row
    assert re.search(r'data-testid="live-consumers">0<', row)
    # audit has nothing to do: no live consumer is no problem there.
    assert _overview_row(dash.get(RELAXED).text, "orders", "audit").startswith("ok|")


def test_only_consumers_with_a_running_worker_count_as_live(dash: TestClient, store: Store) -> None:
    _beat(store, "orders", "billing", "c1")
    row = _overview_row(dash.get(RELAXED).text, "orders", "billing")
    assert re.search(r'data-testid="live-consumers">1<', row)
    assert re.search(r'data-testid="consumers">4<', row)  # c1..c4 listed, one running
    assert row.startswith("ok|")


def test_nothing_done_while_entries_come_in_is_a_problem() -> None:
    def row(added: float, done: float) -> Health:
        return Health(
            "s", "g", 10, 5, 1, 1, 1, None, None, "{s}:dlq", 0, Rates(0, 10, added, done, 0, 1, 5)
        )

    assert _problems(row(3.0, 0.0)) == ("nothing done while entries come in",)
    assert _problems(row(3.0, 2.5)) == ()
    assert _problems(row(0.0, 0.0)) == ()  # idle stream: nothing comes in, nothing to do


def test_oldest_pending_is_graded_by_time_since_delivery_not_entry_age(
    dash: TestClient, store: Store
) -> None:
    c = store.client
    c.xadd("old", {"n": "1"}, id="1000-0")  # an entry from 1970: its age is huge
    c.xgroup_create("old", "g", id="0")
    c.xreadgroup("g", "w1", {"old": ">"})  # delivered just now
    _beat(store, "old", "g", "w1")
    row = _overview_row(dash.get("/").text, "old", "g")
    assert row.startswith("ok|"), row
    oldest = re.search(r'data-testid="oldest">([^<]*)<', row)
    assert oldest
    assert re.fullmatch(r"\d+ms|\d+\.\ds", oldest.group(1))  # seconds at most, not 56 years


def test_an_unknown_lag_ranks_by_its_bound_and_says_so(dash: TestClient, store: Store) -> None:
    c = store.client
    ids = [c.xadd("gappy", {"n": str(i)}) for i in range(30)]
    c.xgroup_create("gappy", "g", id="0")
    c.xreadgroup("g", "w1", {"gappy": ">"}, count=2)
    c.xdel("gappy", ids[10])  # a deleted unread entry: Redis can no longer tell the lag
    _beat(store, "gappy", "g", "w1")
    assert c.xinfo_groups("gappy")[0]["lag"] is None
    for i in range(10):  # known lag 10: more than gappy's pending, less than its bound
        c.xadd("steady", {"n": str(i)})
    c.xgroup_create("steady", "g", id="0")
    c.xgroup_createconsumer("steady", "g", "w1")
    _beat(store, "steady", "g", "w1")
    html = dash.get("/?work_left_warn=5&work_left_crit=1000").text
    row = _overview_row(html, "gappy", "g")
    work = re.search(r'data-testid="work-left" title="a bound[^"]*">([^<]*)<', row)
    assert work, row
    assert work.group(1) == "≤ 31"  # 29 entries + 2 pending
    assert row.startswith("warn|")  # graded by the bound
    streams = re.findall(r'<tr class="level-[a-z]+" data-stream="([^"]+)" data-group="g"', html)
    assert streams == ["gappy", "steady"]  # 31 at most before 10


# --- 12. charts -----------------------------------------------------------------------------------


def test_pending_has_its_own_axis_next_to_a_large_lag() -> None:
    history = History(max_series=1, slots=60)
    now = int(time.time())
    for i in range(5):  # pending 2, lag 50,000: one scale would flatten pending to the floor
        history.record("s", "g", (0, 0, 0, 2, 50_000), at=now - 4 + i)
    chart = pending_chart(history, "s", "g")
    assert chart.unit == "pending (entries)"
    assert chart.unit2 == "lag (entries)"
    assert chart.y_ticks[-1][1] == "2"  # the left axis tops out at pending's scale
    assert chart.y2_ticks[-1][1] == "80k"  # the right one at lag's: 4 round steps of 20k
    pending = next(line for line in chart.lines if line.css == "pending")
    assert pending.last is not None
    assert pending.last[1] == chart.top  # at the top of its own axis, not at the bottom


def test_a_groups_rate_chart_says_the_dead_letter_rate_is_the_streams() -> None:
    history = History(max_series=2, slots=60)
    names = {line.name for line in rate_chart(history, "s", "g", 5).lines}
    assert "dead-lettered (whole stream, all groups)" in names
    assert "dead-lettered" in {line.name for line in rate_chart(history, "s", None, 5).lines}


# --- 10. the claim says what it moves and to whom -------------------------------------------------

CLAIM = "/confirm?action=claim&stream=orders&group=billing&consumer=c1"


def _testid(html: str, testid: str) -> str | None:
    m = re.search(rf'data-testid="{testid}"[^>]*>([^<]*)<', html)
    return m.group(1) if m else None


def test_the_claim_confirmation_counts_the_entries_that_will_move(dash: TestClient) -> None:
    assert _testid(dash.get(CLAIM + "&target=c2&min_idle_ms=0").text, "moving") == "3"
    assert _testid(dash.get(CLAIM + "&target=c2&min_idle_ms=3600000").text, "moving") == "0"


def test_the_claims_minimum_idle_time_defaults_to_the_handlers_claim_idle_ms(
    dash: TestClient, store: Store
) -> None:
    html = dash.get(CLAIM).text
    assert 'value="60000" data-testid="min-idle"' in html  # unknown: the default
    assert "the default claim_idle_ms" in html
    _beat(store, "orders", "billing", "c2", claim_idle_ms={("orders", "billing"): 45_000})
    html = dash.get(CLAIM).text
    assert 'value="45000" data-testid="min-idle"' in html
    assert "the handler&#39;s claim_idle_ms" in html


def test_the_claim_offers_live_consumers_and_warns_about_a_live_source(
    dash: TestClient, store: Store
) -> None:
    html = dash.get(CLAIM).text
    assert _testid(html, "pick-target") is None
    assert "no-live" in html
    assert "warn-source-live" not in html
    _beat(store, "orders", "billing", "c1")
    _beat(store, "orders", "billing", "c2")
    html = dash.get(CLAIM + "&target=c2").text
    assert re.findall(r'data-testid="pick-target">([^<]*)<', html) == ["c2"]
    assert "warn-source-live" in html
    assert "warn-target-not-live" not in html
    assert "create-target" not in html  # c2 exists


def test_a_claim_to_a_consumer_without_a_worker_warns(dash: TestClient) -> None:
    html = dash.get(CLAIM + "&target=c3").text  # c3 exists, no worker runs as it
    assert "warn-target-not-live" in html


def test_a_claim_to_a_consumer_that_does_not_exist_needs_an_explicit_confirmation(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    html = dash.get(CLAIM + "&target=c9&min_idle_ms=0").text
    assert "warn-target-new" in html
    assert 'name="create_target" value="yes" required' in html
    csrf = csrf_of(dash, CLAIM + "&target=c9&min_idle_ms=0")
    form = {
        "csrf": csrf,
        "confirm": "yes",
        "stream": "orders",
        "group": "billing",
        "consumer": "c1",
        "target": "c9",
        "min_idle_ms": "0",
    }
    r = dash.post("/actions/claim", data=form, headers=ORIGIN)
    assert "does not exist" in _notice(dash, r.headers["location"])
    owners = {
        row["name"].decode(): row["pending"]
        for row in store.client.xpending("orders", "billing")["consumers"]
    }
    assert owners["c1"] == 3  # nothing moved
    r = dash.post("/actions/claim", data={**form, "create_target": "yes"}, headers=ORIGIN)
    assert "claimed 3 entries of c1 to c9" in _notice(dash, r.headers["location"])


# --- 9. stale data and a restarted dashboard ------------------------------------------------------


def test_a_restarted_dashboard_shows_what_redis_holds_of_a_dead_consumer(
    store: Store, scene: Scene
) -> None:
    names = _beat(store, "orders", "billing", "c1")
    with client_for(store) as first:
        login(first)
        html = first.get("/workers").text
        assert re.search(r'data-testid="live-count">1<', html)  # c1's worker, live
        assert not _row(html, "c1")  # not among the dead
    store.client.delete(names.key("orders", "billing"))  # the worker is gone for good
    with client_for(store) as restarted:  # a new dashboard process: nothing in its memory
        login(restarted)
        row = _row(restarted.get("/workers").text, "c1")
    assert 'data-state="not running"' in row
    active = re.search(r'data-testid="last-active">([^<]*)<', row)
    assert active
    assert re.fullmatch(r"\d+ms ago|\d+\.\ds ago", active.group(1))  # from XINFO CONSUMERS


def _row(html: str, consumer: str) -> str:
    m = re.search(rf'<tr data-consumer="{consumer}"[^>]*>.*?</tr>', html, re.S)
    return m.group(0) if m else ""
