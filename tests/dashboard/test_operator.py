"""What an operator at 3 a.m. relies on, over HTTP on a real redis-server 7.0 and on the embedded
engine: purge and the dead-letter pages touch dead letters only; the overview grades a stuck
group critical; the claim says what it moves and to whom; the dead-letter pages summarise."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from tests.dashboard.conftest import Scene, Store
from tests.dashboard.test_http import ORIGIN, client_for, csrf_of, login
from tests.dashboard.test_pages import _wait_job, cell_text

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
