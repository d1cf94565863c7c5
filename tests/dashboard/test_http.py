"""The dashboard over HTTP (Starlette's TestClient), on a real redis-server 7.0 and on the embedded
engine: pages show what XINFO/XPENDING say, hostile values stay text, actions need a session, the
CSRF token and a same-origin request, and are logged."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import pytest
import structlog

with warnings.catch_warnings():
    # Starlette 1.x asks for httpx2 over httpx; both drive the same TestClient.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from streamworker.dashboard import DashboardConfig, create_app
from streamworker.dashboard.security import SESSION_COOKIE
from streamworker.errors import ConfigError
from streamworker.io.keys import delayed_key
from streamworker.io.redisio import open_sync_redis
from streamworker.producing.producer import SyncProducer
from tests.dashboard.conftest import BINARY, HOSTILE, HUGE, Scene, Store

TOKEN = "a-long-dashboard-token"
BASE = "http://127.0.0.1"
ORIGIN = {"origin": BASE}


def client_for(store: Store, *, token: str | None = TOKEN, actions: bool = True) -> TestClient:
    app = create_app(
        DashboardConfig(
            redis_url=store.url,
            token=token,
            allow_actions=actions and token is not None,
            allowed_hosts=("127.0.0.1", "localhost"),
        )
    )
    return TestClient(app, base_url=BASE, follow_redirects=False)


def login(client: TestClient) -> None:
    r = client.post("/login", data={"token": TOKEN, "next": "/"}, headers=ORIGIN)
    assert r.status_code == 303
    assert SESSION_COOKIE in r.cookies


def csrf_of(client: TestClient, confirm_url: str) -> str:
    r = client.get(confirm_url)
    assert r.status_code == 200, r.text
    m = re.search(r'name="csrf" value="([^"]+)"', r.text)
    assert m
    return m.group(1)


def cell(html: str, row_attr: str, testid: str) -> str:
    """The text of the ``data-testid`` cell in the table row ``row_attr``."""
    row = re.search(rf"<tr {row_attr}>(.*?)</tr>", html, re.S)
    assert row, f"no row {row_attr}"
    m = re.search(rf'data-testid="{testid}">([^<]*)<', row.group(1))
    assert m, f"no {testid} in row {row_attr}"
    return m.group(1)


@pytest.fixture
def dash(store: Store, scene: Scene) -> Iterator[TestClient]:
    """A logged-in client of a dashboard with actions on, over the standard scene."""
    with client_for(store) as client:
        login(client)
        yield client


def test_every_page_needs_a_login_when_a_token_is_set(store: Store, scene: Scene) -> None:
    with client_for(store) as client:
        for path in ("/", "/stream?stream=orders", "/group?stream=orders&group=billing"):
            r = client.get(path)
            assert r.status_code == 303
            assert r.headers["location"].startswith("/login?next=")


def test_a_wrong_token_does_not_log_in(store: Store, scene: Scene) -> None:
    with client_for(store) as client:
        r = client.post("/login", data={"token": "wrong-token-x"}, headers=ORIGIN)
        assert r.status_code == 403
        assert SESSION_COOKIE not in r.cookies
        assert client.get("/").status_code == 303


def test_login_redirects_only_within_the_dashboard(store: Store, scene: Scene) -> None:
    with client_for(store) as client:
        r = client.post("/login", data={"token": TOKEN, "next": "//evil.example/x"}, headers=ORIGIN)
        assert r.headers["location"] == "/"


def test_stream_page_numbers_equal_xinfo(dash: TestClient, store: Store, scene: Scene) -> None:
    html = dash.get("/stream?stream=orders").text
    for raw in store.client.xinfo_groups("orders"):
        row = f'data-group="{raw["name"].decode()}"'
        assert cell(html, row, "pending") == str(raw["pending"])
        assert cell(html, row, "lag") == str(raw["lag"])
        assert cell(html, row, "consumers") == str(raw["consumers"])
        assert cell(html, row, "last-delivered") == raw["last-delivered-id"].decode()
    listing = dash.get("/streams").text
    assert cell(listing, 'data-stream="orders"', "length") == str(store.client.xlen("orders"))
    assert cell(listing, f'data-stream="{scene.dlq}"', "length") == "3"


def test_group_page_numbers_equal_xpending(dash: TestClient, store: Store, scene: Scene) -> None:
    html = dash.get("/group?stream=orders&group=billing").text
    summary = store.client.xpending("orders", "billing")
    for row in summary["consumers"]:
        name = row["name"].decode()
        assert cell(html, f'data-consumer="{name}"', "pending") == str(row["pending"])
    assert cell(html, 'data-consumer="c3"', "pending") == "0"
    for raw in store.client.xpending_range("orders", "billing", "-", "+", 100):
        row_attr = f'data-id="{raw["message_id"].decode()}"'
        assert cell(html, row_attr, "deliveries") == str(raw["times_delivered"])


def test_a_script_field_renders_as_text(dash: TestClient, scene: Scene) -> None:
    for path in (f"/dlq?key={scene.dlq}", "/entries?stream=orders"):
        html = dash.get(path).text
        assert "<script>window" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html
    assert HOSTILE  # the scene's hostile value is what was checked above


def test_binary_fields_show_as_hex(dash: TestClient, scene: Scene) -> None:
    html = dash.get("/entries?stream=orders").text
    assert BINARY.hex(" ") in html


def test_huge_fields_are_cut_with_a_link_to_all_of_it(dash: TestClient, scene: Scene) -> None:
    html = dash.get("/entries?stream=orders").text
    assert HUGE not in html
    assert "(5000 bytes)" in html
    entry_id = scene.ids[7].decode()
    assert f'href="/entry?stream=orders&amp;id={entry_id}">show all</a>' in html
    assert HUGE in dash.get(f"/entry?stream=orders&id={entry_id}").text


def test_pages_send_a_content_security_policy(dash: TestClient, scene: Scene) -> None:
    r = dash.get("/")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-frame-options"] == "DENY"


def test_the_refresh_request_gets_only_the_live_part(dash: TestClient, scene: Scene) -> None:
    r = dash.get("/stream?stream=orders", headers={"x-dashboard-partial": "1"})
    assert r.status_code == 200
    assert "<html" not in r.text
    assert 'data-group="billing"' in r.text


def test_an_unknown_stream_is_a_404_page(dash: TestClient, scene: Scene) -> None:
    r = dash.get("/stream?stream=%3Cb%3Enope")
    assert r.status_code == 404
    assert "&lt;b&gt;nope" in r.text


def test_a_host_header_from_elsewhere_is_refused(dash: TestClient, scene: Scene) -> None:
    assert dash.get("/", headers={"host": "evil.example"}).status_code == 400


def test_replay_moves_a_dead_letter_back_and_is_logged(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    dead = scene.dead[2].decode()
    csrf = csrf_of(dash, f"/confirm?action=replay&key={scene.dlq}&id={dead}")
    before = store.client.xlen("orders")
    with structlog.testing.capture_logs() as logs:
        r = dash.post(
            "/actions/replay",
            data={"csrf": csrf, "confirm": "yes", "key": scene.dlq, "id": dead},
            headers=ORIGIN,
        )
    assert r.status_code == 303
    assert store.client.xlen(scene.dlq) == 2
    assert store.client.xlen("orders") == before + 1
    _, fields = store.client.xrevrange("orders", count=1)[0]
    assert fields == {b"n": b"5", b"note": HOSTILE.encode()}
    done = [e for e in logs if e["event"] == "dashboard_action_done"]
    assert done[0]["action"] == "replay"
    assert done[0]["id"] == dead
    page = dash.get(r.headers["location"]).text
    assert "replayed dead letter" in page


def test_purge_deletes_one_dead_letter(dash: TestClient, store: Store, scene: Scene) -> None:
    dead = scene.dead[0].decode()
    csrf = csrf_of(dash, f"/confirm?action=purge&key={scene.dlq}&id={dead}")
    r = dash.post(
        "/actions/purge",
        data={"csrf": csrf, "confirm": "yes", "key": scene.dlq, "id": dead},
        headers=ORIGIN,
    )
    assert r.status_code == 303
    assert [i for i, _ in store.client.xrange(scene.dlq)] == scene.dead[1:]


def test_claim_gives_a_consumers_entries_to_another(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    q = "stream=orders&group=billing&consumer=c1"
    csrf = csrf_of(dash, f"/confirm?action=claim&{q}&target=c9")
    form = {"csrf": csrf, "confirm": "yes", "stream": "orders", "group": "billing"}
    claim = {**form, "consumer": "c1", "target": "c9", "create_target": "yes"}
    r = dash.post("/actions/claim", data=claim, headers=ORIGIN)
    assert r.status_code == 303
    owners = {
        row["name"].decode(): row["pending"]
        for row in store.client.xpending("orders", "billing")["consumers"]
    }
    assert owners == {"c2": 1, "c9": 3}


def test_delete_consumer_deletes_only_an_empty_one(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    csrf = csrf_of(dash, "/confirm?action=delete-consumer&stream=orders&group=billing&consumer=c1")
    form = {"csrf": csrf, "confirm": "yes", "stream": "orders", "group": "billing"}
    r = dash.post("/actions/delete-consumer", data={**form, "consumer": "c1"}, headers=ORIGIN)
    assert r.status_code == 303
    assert "holds pending entries" in dash.get(r.headers["location"]).text
    r = dash.post("/actions/delete-consumer", data={**form, "consumer": "c3"}, headers=ORIGIN)
    names = {c["name"].decode() for c in store.client.xinfo_consumers("orders", "billing")}
    assert names == {"c1", "c2", "c4"}


def _purge_form(scene: Scene, csrf: str) -> dict[str, str]:
    return {"csrf": csrf, "confirm": "yes", "key": scene.dlq, "id": scene.dead[0].decode()}


def test_an_action_without_the_token_is_refused(store: Store, scene: Scene) -> None:
    with client_for(store) as client, structlog.testing.capture_logs() as logs:
        r = client.post("/actions/purge", data=_purge_form(scene, "guess"), headers=ORIGIN)
    assert r.status_code == 403
    assert store.client.xlen(scene.dlq) == 3
    assert logs[0]["event"] == "dashboard_action_refused"


def test_an_action_with_a_wrong_csrf_token_is_refused(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    r = dash.post("/actions/purge", data=_purge_form(scene, "not-the-token"), headers=ORIGIN)
    assert r.status_code == 403
    assert store.client.xlen(scene.dlq) == 3


@pytest.mark.parametrize(
    "headers",
    [{"origin": "http://evil.example"}, {"referer": "http://evil.example/page"}, {}],
    ids=["foreign-origin", "foreign-referer", "no-origin"],
)
def test_a_cross_site_action_is_refused(
    dash: TestClient, store: Store, scene: Scene, headers: dict[str, str]
) -> None:
    csrf = csrf_of(dash, f"/confirm?action=purge&key={scene.dlq}&id={scene.dead[0].decode()}")
    r = dash.post("/actions/purge", data=_purge_form(scene, csrf), headers=headers)
    assert r.status_code == 403
    assert store.client.xlen(scene.dlq) == 3


def test_an_unconfirmed_action_is_refused(dash: TestClient, store: Store, scene: Scene) -> None:
    csrf = csrf_of(dash, f"/confirm?action=purge&key={scene.dlq}&id={scene.dead[0].decode()}")
    form = {**_purge_form(scene, csrf), "confirm": ""}
    assert dash.post("/actions/purge", data=form, headers=ORIGIN).status_code == 400
    assert store.client.xlen(scene.dlq) == 3


def test_actions_are_off_without_allow_actions(store: Store, scene: Scene) -> None:
    with client_for(store, actions=False) as client:
        login(client)
        html = client.get(f"/dlq?key={scene.dlq}").text
        assert "replay…" not in html
        assert client.get(f"/confirm?action=purge&key={scene.dlq}&id=1-0").status_code == 403
        r = client.post("/actions/purge", data=_purge_form(scene, "x"), headers=ORIGIN)
        assert r.status_code == 403
    assert store.client.xlen(scene.dlq) == 3


def test_without_a_token_pages_are_open_and_read_only(store: Store, scene: Scene) -> None:
    with client_for(store, token=None) as client:
        assert client.get("/").status_code == 200
        assert "replay…" not in client.get(f"/dlq?key={scene.dlq}").text


def test_unsafe_configurations_are_refused() -> None:
    with pytest.raises(ConfigError, match="without a token"):
        create_app(DashboardConfig(redis_url="redis://x", bind="0.0.0.0"))
    with pytest.raises(ConfigError, match="needs a token"):
        create_app(DashboardConfig(redis_url="redis://x", allow_actions=True))
    create_app(DashboardConfig(redis_url="redis://x", bind="0.0.0.0", token=TOKEN))


def test_an_unreachable_redis_is_a_503_page() -> None:
    from tests.support.servers import free_port

    app = create_app(DashboardConfig(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    with TestClient(app, base_url=BASE) as client:
        r = client.get("/")
    assert r.status_code == 503
    assert "cannot reach Redis" in r.text


def test_replaying_a_missing_dead_letter_says_so_and_changes_nothing(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    csrf = csrf_of(dash, f"/confirm?action=purge&key={scene.dlq}&id={scene.dead[0].decode()}")
    form = {"csrf": csrf, "confirm": "yes", "key": scene.dlq, "id": "1-1"}
    r = dash.post("/actions/replay", data=form, headers=ORIGIN)
    assert r.status_code == 303
    assert "no dead letter 1-1" in dash.get(r.headers["location"]).text
    assert store.client.xlen(scene.dlq) == 3


def test_unknown_form_fields_stay_out_of_the_action(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    csrf = csrf_of(dash, f"/confirm?action=purge&key={scene.dlq}&id={scene.dead[0].decode()}")
    form = {**_purge_form(scene, csrf), "action": "replay", "event": "x"}
    assert dash.post("/actions/purge", data=form, headers=ORIGIN).status_code == 303
    assert store.client.xlen(scene.dlq) == 2


def test_a_key_that_is_not_a_stream_is_a_clear_error(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    store.client.set("plain", "value")
    r = dash.get("/dlq?key=plain")
    assert r.status_code == 400
    assert "WRONGTYPE" in r.text


def test_a_refresh_does_not_swallow_an_actions_notice(
    dash: TestClient, store: Store, scene: Scene
) -> None:
    csrf = csrf_of(dash, f"/confirm?action=purge&key={scene.dlq}&id={scene.dead[0].decode()}")
    r = dash.post("/actions/purge", data=_purge_form(scene, csrf), headers=ORIGIN)
    partial = dash.get(r.headers["location"], headers={"x-dashboard-partial": "1"}).text
    assert "deleted dead letter" not in partial
    assert "deleted dead letter" in dash.get(r.headers["location"]).text
    assert "deleted dead letter" not in dash.get(r.headers["location"]).text  # shown once


def test_stream_page_shows_how_many_delayed_entries_wait(dash: TestClient, store: Store) -> None:
    producer = SyncProducer(open_sync_redis(store.url))
    for n in range(3):
        producer.publish("orders", {"n": str(n)}, delay_ms=3_600_000)
    html = dash.get("/stream?stream=orders").text
    shown = re.search(r'data-testid="delayed">(\d+) ', html)
    assert shown is not None
    assert int(shown.group(1)) == store.client.zcard(delayed_key("orders")) == 3
