"""The admin key endpoints check what the client sends before using it: a key id in the path is ASCII digits within
int64 ("3.0" named key 3; 99999999999999999999 was a 500), and a new key's name is printable text. The real admin
router and key store on SQLite, in a bare app (no tiers)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from aio.db.database import make_engine
from aio.db.keys import KeyStore
from aio.db.migrate import ensure_schema
from aio.http.json_text import INLINE_BYTES
from aio.server.errors import install_error_handlers
from aio.server.routes import admin


class _AdminAllowed:
    async def admin(self, request) -> None:
        return None


@pytest.fixture()
def client(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'aio.db'}")
    ensure_schema(engine)
    app = FastAPI()
    app.state.aio = SimpleNamespace(keys=KeyStore(engine), auth=_AdminAllowed())
    install_error_handlers(app)
    app.include_router(admin.router)
    with TestClient(app) as test_client:
        yield test_client
    engine.dispose()


def _active(client) -> list[tuple[int, str]]:
    return [(k["id"], k["name"]) for k in client.get("/admin/keys").json()["data"] if k["revoked_at"] is None]


def assert_error(response, status: int, param: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param, error


@pytest.mark.parametrize("path, status", [
    ("99999999999999999999", 404), ("9223372036854775808", 404), ("9" * 5000, 404), ("0", 404),
    ("{id}.0", 400), ("+{id}", 400), ("-{id}", 400), ("{id}e0", 400), ("0x{id}", 400), ("²", 400), ("%20{id}", 400),
    ("{id}%20", 400), ("one", 400),
])
def test_a_key_id_in_the_path_is_ascii_digits_within_int64(client, path, status):
    created = client.post("/admin/keys", json={"name": "alpha"})
    assert created.status_code == 201
    key_id = created.json()["id"]
    assert_error(client.delete(f"/admin/keys/{path.format(id=key_id)}"), status, "key_id")
    assert _active(client) == [(key_id, "alpha")]  # "3.0" revoked key 3 before
    assert client.delete(f"/admin/keys/{key_id}").json() == {"id": key_id, "revoked": True}
    assert_error(client.delete(f"/admin/keys/{key_id}"), 404, "key_id")
    assert _active(client) == []


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("body, param", [
    ({"name": "evil\r\n   9  forged"}, "name"), ({"name": "\x1b[31mred"}, "name"), ({"name": "bidi\u202e"}, "name"),
    ({"name": 5}, "name"), ({"name": "ok", "role": "root"}, "role"), ({"name": "ok", "role": True}, "role"),
])
def test_a_new_key_needs_a_printable_name_and_a_known_role(client, body, param, padded):
    raw = json.dumps(body).encode()
    raw += b" " * (INLINE_BYTES + 1) if padded else b""  # the worker thread's path
    assert_error(client.post("/admin/keys", content=raw, headers={"content-type": "application/json"}), 400, param)
    assert _active(client) == []
