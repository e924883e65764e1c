"""The admin key endpoints check what the client sends before using it: a key id in the path is ASCII digits within
int64 ("3.0" named key 3; 99999999999999999999 was a 500), and a new key's name is printable text. The real admin
router and key store on SQLite, in a bare app (no tiers): conftest's admin_client."""
from __future__ import annotations

import json

import pytest

from aio.http.json_text import INLINE_BYTES


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
def test_a_key_id_in_the_path_is_ascii_digits_within_int64(admin_client, path, status):
    created = admin_client.post("/admin/keys", json={"name": "alpha"})
    assert created.status_code == 201
    key_id = created.json()["id"]
    assert_error(admin_client.delete(f"/admin/keys/{path.format(id=key_id)}"), status, "key_id")
    assert _active(admin_client) == [(key_id, "alpha")]  # "3.0" revoked key 3 before
    assert admin_client.delete(f"/admin/keys/{key_id}").json() == {"id": key_id, "revoked": True}
    assert_error(admin_client.delete(f"/admin/keys/{key_id}"), 404, "key_id")
    assert _active(admin_client) == []


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("body, param", [
    ({"name": "evil\r\n   9  forged"}, "name"), ({"name": "\x1b[31mred"}, "name"), ({"name": "bidi\u202e"}, "name"),
    ({"name": 5}, "name"), ({"name": "ok", "role": "root"}, "role"), ({"name": "ok", "role": True}, "role"),
])
def test_a_new_key_needs_a_printable_name_and_a_known_role(admin_client, body, param, padded):
    raw = json.dumps(body).encode()
    raw += b" " * (INLINE_BYTES + 1) if padded else b""  # the worker thread's path
    response = admin_client.post("/admin/keys", content=raw, headers={"content-type": "application/json"})
    assert_error(response, 400, param)
    assert _active(admin_client) == []
