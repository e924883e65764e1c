"""The named poisons of the blast-radius run: every hostile request body the reports found, and the admin probes.
`benchmarks.blast_radius` sends them beside innocent traffic."""
from __future__ import annotations

import json
from typing import Any

from benchmarks.hostile_goals import defs_chain

HELLO = [{"role": "user", "content": "hi"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
SELF_REQUIRED = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
DEFS_CYCLE = {"$defs": {"A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}, "required": ["b"]},
                        "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"]}},
              "$ref": "#/$defs/A"}


def _tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def _schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def _alias_chain(links: int) -> dict:
    defs = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(links)}
    defs[f"D{links}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/D0"}


def poisons() -> list[tuple[str, bytes]]:
    """(name, raw JSON body): the blast-radius report's poisons and the earlier reliability work's hostile input."""
    def chat(model: str = "small", **fields: Any) -> dict:
        return {"model": model, "max_tokens": 5, "messages": HELLO, **fields}

    bodies: dict[str, Any] = {
        "recursive schema ($ref #)": chat(response_format=_schema_format(SELF_REQUIRED)),
        "recursive schema, stream, large": chat("large", stream=True, response_format=_schema_format(SELF_REQUIRED)),
        "recursive schema in tools, required": chat(tools=[_tool("x", SELF_REQUIRED)], tool_choice="required"),
        "$defs cycle A->B->A, named tool": chat(tools=[_tool("x", DEFS_CYCLE)],
                                                tool_choice={"type": "function", "function": {"name": "x"}}),
        "$defs cycle, response_format, auto": chat("auto", response_format=_schema_format(DEFS_CYCLE)),
        "schema nested 200 deep": chat(response_format=_schema_format(_nested(200))),
        "lone surrogate in content": chat(messages=[{"role": "user", "content": "\ud800"}]),
        "lone surrogate, auto (classifier)": chat("auto", messages=[{"role": "user", "content": "a \udfff b"}]),
        "lone surrogate, stream": chat(stream=True, messages=[{"role": "user", "content": "\ud83d"}]),
        "lone surrogate in a content part": chat(messages=[{"role": "user",
                                                            "content": [{"type": "text", "text": "x\ud800"}]}]),
        "lone surrogate in a tool description": chat(tools=[{"type": "function", "function": {
            "name": "f", "description": "\udc00", "parameters": {"type": "object"}}}]),
        "lone surrogate in a schema key": chat(response_format=_schema_format(
            {"type": "object", "properties": {"\ud800": {"type": "string"}}})),
        "lone surrogate in stop": chat(stop=["\ud800"]),
        "lone surrogate in user": chat(user="\ud800"),
        "unknown named tool": chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}),
        "invalid regex pattern": chat(response_format=_schema_format({"type": "string", "pattern": "(unclosed"})),
        "logit_bias outside the vocabulary": chat(logit_bias={"99999999": 5}),
        "n = 1000": chat(n=1000),
        "max_tokens = 1e12": chat(max_tokens=10 ** 12),
        "five stops": chat(stop=["a", "b", "c", "d", "e"]),
        "empty messages": chat(messages=[]),
        "control characters and SQL": chat(messages=[{"role": "user", "content":
                                                      "'); DROP TABLE requests; -- <script>x</script> \x00\x07\x1b[31m"}]),
        "image part": chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]),
        "unknown model": chat("gpt-17"),
        # the hostile-input issue's rows A-K (A-E also in benchmarks.hostile_goals, with their goals)
        "A: $defs chain of 1,000 links": chat(response_format=_schema_format(defs_chain())),
        "A: the chain as a forced tool's parameters": chat(tools=[_tool("x", defs_chain())],
                                                           tool_choice={"type": "function", "function": {"name": "x"}}),
        "A: 2,600 plain $ref links": chat(response_format=_schema_format(_alias_chain(2_600))),
        "A: 3,000 properties": chat(response_format=_schema_format(
            {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(3_000)}})),
        "A: 160 patternProperties": chat(response_format=_schema_format(
            {"type": "object", "patternProperties": {f"^k{i}_[a-z]+$": {"type": "integer"} for i in range(160)}})),
        "B: logit_bias key '²'": chat(logit_bias={"²": 1}),
        "B: logit_bias keys '1' and '01'": chat(logit_bias={"1": 1, "01": 2}),
        "C: 129 tools": chat(tools=[_tool(f"t{i}", {"type": "object"}) for i in range(129)]),
        "D: 16 endless streamed choices": chat(n=16, ignore_eos=True, stream=True, max_tokens=200),
        "F: cycle through an $id URL": chat(response_format=_schema_format(
            {"$id": "https://x.test/s", "type": "object", "properties": {"a": {"$ref": "https://x.test/s"}},
             "required": ["a"]})),
        "F: cycle through a percent-encoded pointer": chat(response_format=_schema_format(
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/A%20B"}}, "required": ["a"],
             "$defs": {"A B": {"$ref": "#"}}})),
        "F: cycle through patternProperties": chat(response_format=_schema_format(
            {"type": "object", "patternProperties": {"^a$": {"$ref": "#"}}, "required": ["a"]})),
        "F: an $anchor ref in a forced tool (valid)": chat(
            tools=[_tool("x", {"type": "object", "properties": {"q": {"$ref": "#me"}}, "required": ["q"],
                               "$defs": {"M": {"$anchor": "me", "type": "integer"}}})],
            tool_choice={"type": "function", "function": {"name": "x"}}),
        "I: max_tokens as a string": {**chat(), "max_tokens": "4"},
        "I: max_tokens true": {**chat(), "max_tokens": True},
        "I: n as a string": chat(n="2"),
        "I: stream as a string": chat(stream="true"),
        "I: aio_cascade 'yes'": chat("auto", aio_cascade="yes"),
        "I: aio_cascade 1": chat("auto", aio_cascade=1),
        "I: aio_cascade_threshold as a string": chat("auto", aio_cascade_threshold="-0.5"),
        "J: temperature 1e-300 (valid: greedy)": chat(temperature=1e-300),
        "J: repetition_penalty 1e-300": chat(repetition_penalty=1e-300),
        "K: NUL in content (valid)": chat(messages=[{"role": "user", "content": "a\u0000b"}]),
    }
    raw = [(name, json.dumps(body).encode()) for name, body in bodies.items()]
    raw += [("not UTF-8", b"\xff\xfe not utf-8"), ("not JSON", b"{"), ("a list", b"[]"), ("empty body", b""),
            ("NaN temperature", b'{"model": "small", "messages": [{"role": "user", "content": "hi"}], '
                                b'"temperature": NaN}'),
            ("raw surrogate bytes", b'{"model": "small", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}'),
            ("JSON nested 100,000 deep", b'{"model": "small", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")]
    return raw


def admin_poisons() -> list[tuple[str, str, str, dict | None]]:
    """(name, method, path, JSON body) sent with the admin key: rows G and H."""
    return [("G: DELETE a 20-digit key id", "DELETE", "/admin/keys/99999999999999999999", None),
            ("G: DELETE key id '3.0'", "DELETE", "/admin/keys/3.0", None),
            ("H: a key name with CR/LF/ESC", "POST", "/admin/keys", {"name": "evil\r\n 9 forged \x1b[31m"})]
