"""DNS rebinding: an open-mode server (no API keys, loopback) answers only loopback Host names and the ones
`allowed_hosts` lists, with an OpenAI-shaped 400 for any other, before the body is read; a server with keys
answers any Host unless `allowed_hosts` is set. The middleware in a bare app, and its registration by create_app."""
from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from aio.server.host_check import HostCheckMiddleware, host_check, host_name
from aio.settings import load_settings


def app_with(**options) -> FastAPI:
    app = FastAPI()
    app.add_middleware(HostCheckMiddleware, **options)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    return app


def get(app: FastAPI, host: str | None):
    client = TestClient(app)
    headers = {"host": host} if host is not None else {}
    if host is None:  # TestClient always sends one: strip it at the ASGI level
        inner = app.build_middleware_stack()

        async def no_host(scope, receive, send):
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"host"]
            await inner(scope, receive, send)

        app.build_middleware_stack = lambda: no_host
    return client.get("/health", headers=headers)


LOOPBACK = ["localhost", "localhost:8000", "LOCALHOST:8000", "LocalHost", "127.0.0.1", "127.0.0.1:65535",
            "127.1.2.3:80", "[::1]", "[::1]:8000"]
REFUSED = ["evil.example", "evil.example:8000", "localhost.evil.example", "127.0.0.1.nip.io", "localhost.",
           "10.0.0.1:8000", "0.0.0.0", "[::]:8000", "[::ffff:7f00:1]:80x", "", "aio.internal"]


@pytest.mark.parametrize("host", LOOPBACK)
def test_open_mode_answers_loopback_names_with_any_port_and_case(host):
    response = get(app_with(allowed=[], loopback=True), host)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.parametrize("host", REFUSED + [None])
def test_open_mode_refuses_any_other_host_with_an_openai_shaped_400(host):
    response = get(app_with(allowed=[], loopback=True), host)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "host_not_allowed" and error["param"] is None
    assert "allowed_hosts" in error["message"] and "localhost" in error["message"]


def test_the_refusal_comes_before_the_body_is_read():
    client = TestClient(app_with(allowed=[], loopback=True))
    response = client.post("/v1/chat/completions", content=b"x" * 100_000, headers={"host": "evil.example"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "host_not_allowed"
    ok = client.post("/v1/chat/completions", content=b"x" * 10, headers={"host": "localhost:1"})
    assert ok.json() == {"bytes": 10}


def test_allowed_hosts_adds_names_and_with_keys_replaces_the_loopback_ones():
    open_app = app_with(**host_check(True, ["AIO.internal", "[fd00::5]"]))
    assert get(open_app, "aio.internal:8443").status_code == 200
    assert get(open_app, "[fd00::5]:80").status_code == 200 and get(open_app, "localhost").status_code == 200
    assert get(open_app, "evil.example").status_code == 400
    keyed = app_with(**host_check(False, ["aio.example.com"]))
    assert get(keyed, "aio.example.com").status_code == 200 and get(keyed, "localhost").status_code == 400
    assert host_check(False, []) is None  # keys, no list: every Host


def test_host_names_lose_the_port_and_the_brackets():
    assert [host_name(h) for h in ("Example.COM:80", "[::1]:8000", "[::1]", "127.0.0.1", "::1")] == \
        ["example.com", "::1", "::1", "127.0.0.1", "::1"]


@pytest.mark.parametrize("open_endpoint, allowed, host, status", [
    (True, [], "evil.example", 400), (True, [], "localhost:8000", 200), (True, ["lab.local"], "lab.local", 200),
    (False, [], "evil.example", 200), (False, ["aio.example.com"], "evil.example", 400),
])
def test_create_app_registers_the_check_for_its_settings(tmp_path, monkeypatch, open_endpoint, allowed, host, status):
    """Before the lifespan (no tiers): the middleware stack answers, or the router's 404 for a GET on no route."""
    import os

    from aio.server.app import create_app

    for name in [k for k in os.environ if k.startswith("AIO_")]:
        monkeypatch.delenv(name)
    settings = load_settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'aio.db'}",
                             open_endpoint=open_endpoint, allowed_hosts=allowed)
    client = TestClient(create_app(settings, admin_key="k" * 40))  # not entered: no lifespan, no tiers
    response = client.get("/no-such-route", headers={"host": host})
    assert response.status_code == (400 if status == 400 else 404), response.text
    if status == 400:
        assert response.json()["error"]["code"] == "host_not_allowed"
