"""Dashboard sign-in: the cookie holds a session token (never a key), sessions end at expiry, at sign-out and when
their key is revoked; cross-site posts and brute force are refused. The store and the guards directly, then a live
`aio serve` end to end."""
from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import httpx
import pytest
import sqlalchemy as sa

from aio.dashboard.login_guard import cross_site_reason
from aio.http.throttle import FailureLimiter
from aio.dashboard.sessions import SessionStore, token_hash
from aio.db import migrate
from aio.db.database import make_engine
from aio.db.keys import KeyStore
from aio.db.models import DashboardSession
from aio.db.records import utcnow
from benchmarks.live_server import start_server

ADMIN_KEY = "sessions-test-admin-key-0123456789abcdefghijklmnop"


@pytest.fixture
def engine(sqlite_engine):
    return sqlite_engine


def test_a_session_stores_only_a_hash_and_expires_server_side(engine):
    store = SessionStore(engine, ADMIN_KEY, timedelta(hours=1))
    now = utcnow()
    token = store.open(None, "127.0.0.1", now=now)
    assert ADMIN_KEY not in token and store.is_valid(token, now=now)
    with engine.connect() as connection:
        rows = connection.execute(sa.select(DashboardSession)).all()
    assert [r.token_hash for r in rows] == [token_hash(token)] and token not in str(rows)
    assert not store.is_valid(token, now=now + timedelta(hours=1, seconds=1))
    assert not store.is_valid(token + "x", now=now) and not store.is_valid("", now=now)


def test_logout_and_a_changed_admin_key_end_the_session(engine):
    store = SessionStore(engine, ADMIN_KEY, timedelta(hours=1))
    token, other = store.open(None), store.open(None)
    assert store.close(token) and not store.is_valid(token) and not store.close(token)
    assert store.is_valid(other)
    assert not SessionStore(engine, "a-new-admin-key", timedelta(hours=1)).is_valid(other)


def test_revoking_an_admin_role_key_ends_its_sessions(engine):
    keys = KeyStore(engine)
    info, _ = keys.create("ops", "admin")
    store = SessionStore(engine, ADMIN_KEY, timedelta(hours=1))
    token = store.open(info.id)
    assert store.is_valid(token)
    keys.revoke(info.id)
    assert not store.is_valid(token)


def test_expired_sessions_are_deleted_when_a_new_one_opens(engine):
    store = SessionStore(engine, ADMIN_KEY, timedelta(minutes=1))
    now = utcnow()
    store.open(None, now=now)
    store.open(None, now=now + timedelta(minutes=2))
    with engine.connect() as connection:
        assert connection.scalar(sa.select(sa.func.count()).select_from(DashboardSession)) == 1


def test_failure_limiter_blocks_after_max_failures_per_window():
    limiter = FailureLimiter(max_failures=3, window_s=60)
    for t in (0, 1, 2):
        assert limiter.retry_after("a", now=t) is None
        limiter.failed("a", now=t)
    assert limiter.retry_after("a", now=3) == pytest.approx(57)
    assert limiter.retry_after("b", now=3) is None  # per client
    assert limiter.retry_after("a", now=60.5) is None  # the first failure left the window
    limiter.succeeded("a")
    assert limiter.retry_after("a", now=3) is None


def _request(peer: str, scheme: str = "http", **headers: str):
    return SimpleNamespace(client=SimpleNamespace(host=peer), headers={k.lower(): v for k, v in headers.items()},
                           url=SimpleNamespace(scheme=scheme))


@pytest.mark.parametrize("headers, refused", [
    ({}, False),  # curl, scripts: no ambient browser cookie involved
    ({"Origin": "http://dash.example:8000", "Host": "dash.example:8000", "Sec-Fetch-Site": "same-origin"}, False),
    ({"Origin": "https://evil.example", "Host": "dash.example:8000"}, True),
    ({"Origin": "null", "Host": "dash.example:8000"}, True),
    ({"Sec-Fetch-Site": "cross-site", "Host": "dash.example:8000"}, True),
    ({"Sec-Fetch-Site": "same-site", "Host": "dash.example:8000"}, True),
    ({"Sec-Fetch-Site": "same-origin", "Origin": "null", "Host": "dash.example:8000"}, False),  # no-referrer page
])
def test_cross_site_form_posts_are_recognised(headers, refused):
    assert (cross_site_reason(_request("127.0.0.1", **headers)) is not None) == refused


# --- end to end ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("sessions")
    url = f"sqlite:///{home / 'aio.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    keys = KeyStore(engine)
    admin_info, admin_role_key = keys.create("ops", "admin")
    engine.dispose()
    live = start_server(None, home, url, admin_key=ADMIN_KEY, AIO_MONITOR_MODE="off", AIO_DEMO_MODEL="random",
                        AIO_LOGIN_MAX_FAILURES="3")
    try:
        yield SimpleNamespace(live=live, url=url, admin_role_key=admin_role_key, admin_id=admin_info.id)
    finally:
        live.stop()


def _login(base: str, key: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{base}/dashboard/login", data={"key": key}, headers=headers)


def _token(response: httpx.Response) -> str:
    return response.cookies.get("aio_dashboard", path="/dashboard")


def test_login_sets_a_session_cookie_not_the_key_and_logout_ends_it(server):
    base = server.live.base_url
    response = _login(base, ADMIN_KEY)
    assert response.status_code == 303
    cookies = response.headers.get_list("set-cookie")
    assert sorted(c.split("Path=")[1].split(";")[0] for c in cookies) == ["/api/dashboard", "/dashboard"]
    for cookie in cookies:
        assert ADMIN_KEY not in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "Secure" not in cookie  # plain http, cookie_secure = "auto"
    token = _token(response)
    assert token == response.cookies.get("aio_dashboard", path="/api/dashboard")
    assert httpx.get(f"{base}/api/dashboard/summary", cookies={"aio_dashboard": token}).status_code == 200
    assert httpx.get(f"{base}/dashboard", cookies={"aio_dashboard": token}).status_code == 200
    logout = httpx.post(f"{base}/dashboard/logout", cookies={"aio_dashboard": token})
    assert logout.status_code == 303
    response = httpx.get(f"{base}/api/dashboard/summary", cookies={"aio_dashboard": token})
    assert response.status_code == 401 and response.json()["error"]["code"] == "session_expired"
    assert httpx.get(f"{base}/dashboard", cookies={"aio_dashboard": token}).status_code == 401


def test_an_expired_session_gets_401(server):
    token = _token(_login(server.live.base_url, ADMIN_KEY))
    engine = make_engine(server.url)
    with engine.begin() as connection:
        connection.execute(sa.update(DashboardSession).where(DashboardSession.token_hash == token_hash(token))
                           .values(expires_at=utcnow() - timedelta(seconds=1)))
    engine.dispose()
    response = httpx.get(f"{server.live.base_url}/api/dashboard/summary", cookies={"aio_dashboard": token})
    assert response.status_code == 401


def test_revoking_the_admin_role_key_ends_its_browser_sessions(server):
    base = server.live.base_url
    token = _token(_login(base, server.admin_role_key))
    assert httpx.get(f"{base}/api/dashboard/summary", cookies={"aio_dashboard": token}).status_code == 200
    revoke = httpx.delete(f"{base}/admin/keys/{server.admin_id}", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert revoke.status_code in (200, 204), revoke.text
    assert httpx.get(f"{base}/api/dashboard/summary", cookies={"aio_dashboard": token}).status_code == 401


def test_cross_site_login_is_refused(server):
    base = server.live.base_url
    response = _login(base, ADMIN_KEY, Origin="https://evil.example")
    assert response.status_code == 403 and "aio_dashboard" not in response.cookies
    assert "another site" in response.text


def test_brute_force_gets_429_after_the_allowed_failures(server):
    base = server.live.base_url
    statuses = [_login(base, f"aio-wrong-{i}").status_code for i in range(3)]
    assert statuses == [401, 401, 401]
    blocked = _login(base, "aio-wrong-3")
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
    # An admin-role API key waits too; the configured admin key is never locked out (the operator's way in).
    assert _login(base, server.admin_role_key).status_code == 429
    assert _login(base, ADMIN_KEY).status_code == 303
