"""Request errors a person can act on: the exact messages, params and codes of the chat endpoint's validation
(the real schema, error handlers and body-size middleware in a bare app, no tiers)."""
from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from aio.api.schemas import ChatCompletionRequest
from aio.chat.messages import normalize_messages
from aio.server.body_limit import BodyLimitMiddleware
from aio.server.errors import install_error_handlers

MAX_BODY = 2048
URL = "/v1/chat/completions"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=MAX_BODY)
    install_error_handlers(app)

    @app.post(URL)
    async def chat(body: ChatCompletionRequest) -> dict:
        return {"messages": normalize_messages(body.messages)}

    return TestClient(app)


def body(**fields) -> bytes:
    return json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


@pytest.mark.parametrize("content, headers, message, param, code", [
    (b"", JSON, "the request body is empty: send a JSON object with 'model' and 'messages'", None, "invalid_json"),
    (b"", {}, "the request body is empty: send a JSON object with 'model' and 'messages'", None, "invalid_json"),
    (b"hello", {"content-type": "text/plain"},
     "the request body must be JSON (Content-Type: application/json), not text/plain", None, "invalid_json"),
    (b"[1]", JSON, "the request body must be a JSON object, not [1]", None, "invalid_json"),
    (b"{not json", JSON, "the request body is not valid JSON", None, "invalid_json"),
    (b'{"messages": []}', JSON, "missing required parameter: 'model'", "model", "missing_required_parameter"),
    (b'{"model": "auto", "messages": [{"role": "user", "content": 5}]}', JSON,
     "invalid value for 'messages.0.content': should be a string or a list, got 5", "messages.0.content",
     "invalid_value"),
    (body(stop=5), JSON, "invalid value for 'stop': should be a string or a list, got 5", "stop", "invalid_value"),
    (body(stream_options=5), JSON, "invalid value for 'stream_options': should be a JSON object, got 5",
     "stream_options", "invalid_value"),
    (body()[:-1] + b', "temperature": NaN}', JSON, "invalid value for 'temperature': must be a finite number, got nan",
     "temperature", "invalid_value"),
    (body()[:-1] + b', "top_p": Infinity}', JSON, "invalid value for 'top_p': must be a finite number, got inf",
     "top_p", "invalid_value"),
    (body(temperature=3), JSON, "invalid value for 'temperature': should be less than or equal to 2, got 3",
     "temperature", "invalid_value"),
])
def test_validation_errors_say_what_is_wrong(client, content, headers, message, param, code):
    response = client.post(URL, content=content, headers=headers)
    assert response.status_code == 400
    assert response.json() == {"error": {"message": message, "type": "invalid_request_error", "param": param,
                                         "code": code}}


def test_oversized_bodies_get_the_same_413_by_content_length_and_chunked(client):
    big = body(user="x" * (MAX_BODY + 10))
    by_length = client.post(URL, content=big, headers=JSON)

    def chunks():
        yield big

    chunked = client.post(URL, content=chunks(), headers=JSON)
    assert by_length.status_code == chunked.status_code == 413
    assert by_length.json() == chunked.json() == {"error": {
        "message": f"the request body is larger than {MAX_BODY} bytes (max_body_bytes)",
        "type": "invalid_request_error", "param": None, "code": "request_too_large"}}


def test_an_empty_user_message_is_accepted_as_openai_does(client):
    response = client.post(URL, content=body(messages=[{"role": "user", "content": ""}]), headers=JSON)
    assert response.status_code == 200 and response.json()["messages"] == [{"role": "user", "content": ""}]
