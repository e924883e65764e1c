"""The request model's types are OpenAI's, strictly: a string is not an integer, a bool is not a number, a number is
not a bool (an integer is a number); logit_bias keys are ASCII token ids; every list and string a client can make
long has a bound. Through the real route class, for a small body (parsed on the loop) and a large one (parsed and
validated in the worker thread): the same 400 with the field as `param`."""
from __future__ import annotations

import json

import pytest
from fastapi import APIRouter, Depends, FastAPI, Header
from fastapi.testclient import TestClient

from aio.api.errors import APIError
from aio.api.schemas import ChatCompletionRequest, CreateKeyRequest
from aio.chat.request_options import chat_options
from aio.http.json_text import INLINE_BYTES, TextCheckedRoute
from aio.server.errors import install_error_handlers

URL = "/v1/chat/completions"
HEADERS = {"content-type": "application/json", "authorization": "Bearer good"}
HELLO = [{"role": "user", "content": "hi"}]


def _key(authorization: str | None = Header(None)) -> None:
    if authorization != "Bearer good":
        raise APIError(401, "no valid key")


@pytest.fixture(scope="module")
def client() -> TestClient:
    router = APIRouter(route_class=TextCheckedRoute)

    @router.post(URL, dependencies=[Depends(_key)])
    async def chat(body: ChatCompletionRequest) -> dict:
        return body.model_dump(by_alias=True)

    @router.post("/keys")
    async def keys(body: CreateKeyRequest) -> dict:
        return body.model_dump()

    app = FastAPI()
    install_error_handlers(app)
    app.include_router(router)
    return TestClient(app)


def encode(body: dict, where: str) -> bytes:
    """`where` "worker": padded past INLINE_BYTES with whitespace, so the worker thread parses and validates it."""
    raw = json.dumps(body).encode()
    return raw + b" " * (INLINE_BYTES + 1 - len(raw)) if where == "worker" else raw


def post(client: TestClient, where: str, **fields):
    return client.post(URL, content=encode({"model": "auto", "messages": HELLO, **fields}, where), headers=HEADERS)


def assert_400(response, param: str, *words: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert all(w in error["message"] for w in words), error["message"]


WHERE = ["loop", "worker"]

WRONG_TYPES = [
    ("max_tokens", "4"), ("max_tokens", True), ("max_tokens", 4.0), ("max_completion_tokens", "4"),
    ("n", "2"), ("n", True), ("stream", "true"), ("stream", 1), ("logprobs", 1), ("logprobs", "true"),
    ("top_logprobs", "2"), ("seed", "1"), ("seed", True), ("seed", 1.5), ("aio_cascade", "yes"), ("aio_cascade", 1),
    ("aio_cascade_threshold", "-0.5"), ("aio_cascade_threshold", False), ("aio_quality", "1"), ("aio_quality", True),
    ("temperature", "1"), ("temperature", True), ("top_p", "0.5"), ("presence_penalty", True),
    ("frequency_penalty", "1"), ("top_k", "5"), ("top_k", True), ("top_k", 5.0), ("min_tokens", "1"),
    ("min_tokens", False), ("ignore_eos", 1), ("ignore_eos", "true"), ("parallel_tool_calls", 1),
    ("repetition_penalty", "1.1"), ("repetition_penalty", True), ("user", 5), ("model", 5), ("stop", 5),
    ("tool_choice", 5),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("field, value", WRONG_TYPES)
def test_a_value_of_the_wrong_type_is_a_400_naming_the_field(client, where, field, value):
    assert_400(post(client, where, **{field: value}), field, "should be")


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("fields, param", [
    ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ({"stop": ["a", 1]}, "stop.1"),
    ({"logit_bias": {"5": True}}, "logit_bias.5"),
    ({"logit_bias": {"5": "1"}}, "logit_bias.5"),
    ({"messages": [{"role": "user", "content": "hi", "name": 5}]}, "messages.0.name"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}], "tool_call_id": 7}]},
     "messages.0.tool_call_id"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, "tools.0.function.strict"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools.0.function.parameters"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": 1}}},
     "response_format.json_schema.strict"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                         "function": {"name": "f", "arguments": {}}}]}]},
     "messages.0.tool_calls.0.function.arguments"),
])
def test_nested_fields_are_strict_too(client, where, fields, param):
    assert_400(post(client, where, **fields), param)


@pytest.mark.parametrize("where", WHERE)
def test_an_integer_is_a_number_and_json_types_pass_as_they_are(client, where):
    response = post(client, where, temperature=1, top_p=1, presence_penalty=0, aio_cascade_threshold=-1,
                    aio_quality=0, logit_bias={"5": 1, "0": -100}, stream=False, n=2, max_tokens=4, seed=-3,
                    stream_options={"include_usage": True}, repetition_penalty=2)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["temperature"] == 1.0 and isinstance(body["temperature"], float)
    assert (body["n"], body["max_tokens"], body["seed"], body["logit_bias"]) == (2, 4, -3, {"5": 1.0, "0": -100.0})


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("bias", [{"²": 1}, {"³": 1}, {"١": 1}, {"-1": 1}, {" 1": 1}, {"1.0": 1}, {"": 1},
                                  {"0x10": 1}, {"2147483648": 1}, {"9" * 30: 1}, {"1": 1, "01": 2}])
def test_logit_bias_keys_are_ascii_token_ids_that_fit(client, where, bias):
    """"²".isdigit() is true and int("²") raises: it was a 500 without a request id."""
    assert_400(post(client, where, logit_bias=bias), "logit_bias", "logit_bias")


def _tools(n: int) -> list[dict]:
    return [{"type": "function", "function": {"name": f"f{i}"}} for i in range(n)]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("fields, param, words", [
    ({"tools": _tools(129)}, "tools", ("at most 128 items", "got 129")),
    ({"messages": HELLO * 2049}, "messages", ("at most 2048",)),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}] * 2049}]}, "messages.0.content",
     ("at most 2048",)),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": ""}}] * 1025}]}, "messages.0.tool_calls", ("at most 1024",)),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", ("at most 4",)),
    ({"stop": "x" * 257}, "stop", ("at most 256 characters",)),
    ({"stop": ["x" * 257]}, "stop", ("at most 256 characters",)),
    ({"user": "u" * 257}, "user", ("256",)),
    ({"model": "m" * 257}, "model", ("256",)),
    ({"messages": [{"role": "user", "content": "hi", "name": "n" * 65}]}, "messages.0.name", ("64",)),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": "d" * 32_769}}]},
     "tools.0.function.description", ("32768",)),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"p": "x" * 100_000}}}]},
     "tools.0.function.parameters", ("100000 characters",)),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"p": "x" * 100_000}}}},
     "response_format.json_schema.schema", ("100000 characters",)),
    ({"logit_bias": {str(i): 1 for i in range(1025)}}, "logit_bias", ("at most 1024",)),
])
def test_lists_and_strings_have_bounds(client, where, fields, param, words):
    assert_400(post(client, where, **fields), param, *words)


@pytest.mark.parametrize("where", WHERE)
def test_the_bounds_themselves_are_accepted(client, where):
    response = post(client, where, tools=_tools(128), stop=["x" * 256] * 4, logit_bias={str(i): 1 for i in range(1024)},
                    messages=[{"role": "user", "content": "hi", "name": "n" * 64}] * 2048)
    assert response.status_code == 200, response.text
    assert len(response.json()["tools"]) == 128 and len(response.json()["messages"]) == 2048


@pytest.mark.parametrize("where", WHERE)
def test_the_key_is_checked_before_the_body_is_reported(client, where):
    """A large invalid body validated in the worker still answers 401 to a caller without a key, as FastAPI
    orders it (dependencies first)."""
    raw = encode({"model": 5, "messages": HELLO}, where)
    response = client.post(URL, content=raw, headers={**HEADERS, "authorization": "Bearer wrong"})
    assert response.status_code == 401 and response.json()["error"]["message"] == "no valid key"
    assert_400(client.post(URL, content=raw, headers=HEADERS), "model")


def test_duplicate_tool_names_are_found_in_linear_time():
    """The duplicate check compares each name with a set, not with every other name (names.count was O(n^2): 40,000
    tools held the event loop 12.6 s). Counted by protocol: a name's __eq__ runs a bounded number of times."""
    calls = [0]

    class Name(str):
        __hash__ = str.__hash__

        def __eq__(self, other: object) -> bool:
            calls[0] += 1
            return str.__eq__(self, other)

    n = 3000
    body = ChatCompletionRequest.model_validate({"model": "auto", "messages": HELLO})
    tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(n)]
    from aio.api.schemas import ToolDefinition

    body.tools = [ToolDefinition.model_validate(t) for t in tools]
    for tool in body.tools:
        tool.function.name = Name(tool.function.name)
    options = chat_options(body)
    assert options is not None and len(options.tools) == n
    assert calls[0] < 10 * n
    body.tools.append(body.tools[5])
    with pytest.raises(APIError, match="'f5' is given more than once"):
        chat_options(body)


@pytest.mark.parametrize("name", ["evil\r\n   9  admin", "a\nb", "\x1b[31mred", "bell\x07", "c1\x85", "del\x7f",
                                  "bidi\u202egnp.exe", "zw\u200bj", "ls\u2028x"])
def test_key_names_are_printable_text(client, name):
    body = json.dumps({"name": name}).encode()
    assert_400(client.post("/keys", content=body, headers=HEADERS), "name", "printable", repr(name))
    with pytest.raises(ValueError, match="printable"):
        CreateKeyRequest.model_validate({"name": name})
    body = json.dumps({"name": "lone \ud800"}).encode()  # refused where the body is parsed, as any text
    assert_400(client.post("/keys", content=body, headers=HEADERS), "name", "surrogate")


@pytest.mark.parametrize("body, param", [({"name": 5}, "name"), ({"name": "ok", "role": "root"}, "role"),
                                         ({"name": "ok", "role": 1}, "role"), ({"name": "n" * 101}, "name"),
                                         ({"name": "  "}, "name")])
def test_a_key_request_is_strict(client, body, param):
    assert_400(client.post("/keys", content=json.dumps(body).encode(), headers=HEADERS), param)


def test_a_printable_key_name_is_taken():
    assert CreateKeyRequest.model_validate({"name": "ci bot — prod", "role": "admin"}).name == "ci bot — prod"
