"""Tools, tool_choice, response_format and the sampling parameters through the one endpoint, with real clients
(the openai SDK, LangChain) against a live `aio serve` on the embedded real model (SmolLM2-135M-Instruct).

Guided decoding makes forced tool calls and JSON formats parse whatever the model; the model being real makes
its JSON end on its own, so sampled answers are complete rather than cut at max_tokens.
"""
from __future__ import annotations

import asyncio
import json

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from benchmarks.live_server import start_server
from tests.test_embedded_default import ADMIN, require_smollm2
from tiers.engine.sampling_params import SamplingParams
from tiers.serving.remote import RemoteTier
from tiers.serving.tools.options import ChatOptions



WEATHER_PARAMETERS = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "London", "Tokyo", "Lima"]},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city",
                                            "parameters": WEATHER_PARAMETERS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The current time in a timezone",
                                         "parameters": {"type": "object", "properties": {
                                             "timezone": {"type": "string", "enum": ["UTC", "CET", "JST"]}},
                                             "required": ["timezone"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "enum": ["Ada", "Alan", "Grace"]},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "languages": {"type": "array", "items": {"type": "string", "enum": ["python", "c", "lisp"]}, "maxItems": 3},
    "retired": {"type": "boolean"}},
    "required": ["name", "age", "languages", "retired"], "additionalProperties": False}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    home = tmp_path_factory.mktemp("tools-real")
    live = start_server(None, home, f"sqlite:///{home / 'aio.db'}", admin_key=ADMIN, timeout=600,
                        AIO_MONITOR_MODE="off")
    yield live
    live.stop()


@pytest.fixture()
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.api_url, api_key="any", max_retries=0, timeout=300)


def tool_calls_of(stream) -> tuple[list[dict], str | None, str]:
    """Folds a streamed answer's tool-call deltas as a client would; also its finish reason and content."""
    calls: list[dict] = []
    finish, content = None, ""
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                if delta.index == len(calls):
                    assert delta.id and delta.function.name, "the first piece of a call has its id and name"
                    calls.append({"id": delta.id, "name": delta.function.name, "arguments": ""})
                calls[delta.index]["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    return calls, finish, content


def check_call(name: str, arguments: str) -> dict:
    schema = {"get_weather": WEATHER_PARAMETERS, "get_time": TIME["function"]["parameters"]}[name]
    parsed = json.loads(arguments)
    jsonschema.validate(parsed, schema)
    return parsed


# --- tool_choice ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_named_tool_choice_always_gives_that_call(client, stream):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    kwargs = dict(model="small", messages=ASK, tools=[WEATHER, TIME], tool_choice=choice, max_tokens=60,
                  temperature=0)
    if stream:
        calls, finish, content = tool_calls_of(client.chat.completions.create(stream=True, **kwargs))
    else:
        response = client.chat.completions.create(**kwargs)
        message, finish, content = response.choices[0].message, response.choices[0].finish_reason, None
        assert message.content is None
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls]
    assert finish == "tool_calls" and not content
    assert len(calls) == 1 and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    check_call("get_weather", calls[0]["arguments"])


@pytest.mark.parametrize("stream", [False, True])
def test_required_gives_at_least_one_valid_call_of_the_tools(client, stream):
    kwargs = dict(model="auto", messages=ASK, tools=[WEATHER, TIME], tool_choice="required", max_tokens=120,
                  temperature=0.8, seed=3)
    if stream:
        calls, finish, _ = tool_calls_of(client.chat.completions.create(stream=True, **kwargs))
    else:
        response = client.chat.completions.create(**kwargs)
        finish = response.choices[0].finish_reason
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in response.choices[0].message.tool_calls]
    assert finish == "tool_calls" and calls
    assert len({c["id"] for c in calls}) == len(calls)
    for call in calls:
        check_call(call["name"], call["arguments"])


def test_parallel_tool_calls_false_gives_exactly_one_call(client):
    response = client.chat.completions.create(model="small", messages=ASK, tools=[WEATHER, TIME],
                                              tool_choice="required", parallel_tool_calls=False, max_tokens=120,
                                              temperature=1.0, seed=11)
    assert len(response.choices[0].message.tool_calls) == 1


# issue 23: SmolLM2 repeated this call until max_tokens (the array was unbounded) and the whole array came back as
# content, with no tool_calls.
ISSUE_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ISSUE_TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The current time in a timezone",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}}
ISSUE_ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


def required_answer(client, stream: bool, **kwargs) -> tuple[list[dict], str | None, str | None]:
    """The calls, finish reason and content of a tool_choice="required" answer on the small tier, at temperature 0."""
    kwargs = dict(model="small", messages=ISSUE_ASK, tool_choice="required", temperature=0, **kwargs)
    if stream:
        return tool_calls_of(client.chat.completions.create(stream=True, **kwargs))
    choice = client.chat.completions.create(**kwargs).choices[0]
    assert choice.message.tool_calls is not None, choice.message.content
    calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
             for c in choice.message.tool_calls]
    return calls, choice.finish_reason, choice.message.content


def assert_paris_weather(call: dict) -> None:
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    arguments = json.loads(call["arguments"])
    assert isinstance(arguments.get("city"), str) and arguments["city"]


@pytest.mark.parametrize("parallel, max_tokens, stream", [(None, 60, False), (None, 200, True), (False, 60, True),
                                                       (False, 200, False)])
def test_required_returns_one_call_of_the_one_tool_whatever_the_budget(client, parallel, max_tokens, stream):
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    calls, finish, content = required_answer(client, stream, tools=[ISSUE_WEATHER], max_tokens=max_tokens, **extra)
    assert finish == "tool_calls" and not content
    assert len(calls) == 1
    assert_paris_weather(calls[0])


@pytest.mark.parametrize("stream", [False, True])
def test_a_required_answer_cut_by_max_tokens_returns_its_complete_calls(client, stream):
    """With two tools the model calls get_weather, then get_time (31 tokens); cut in the second call, the first
    comes back as a call and the finish reason says the answer was cut."""
    calls, finish, content = required_answer(client, stream, tools=[ISSUE_WEATHER, ISSUE_TIME], max_tokens=24)
    assert finish == "length" and not content
    assert len(calls) == 1
    assert_paris_weather(calls[0])


def test_none_answers_in_text(client):
    response = client.chat.completions.create(model="small", messages=ASK, tools=[WEATHER], tool_choice="none",
                                              max_tokens=20, temperature=0)
    message = response.choices[0].message
    assert message.tool_calls is None and message.content and response.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("stream", [False, True])
def test_auto_gives_a_call_or_text_in_openais_shape(client, stream):
    kwargs = dict(model="small", messages=ASK, tools=[WEATHER], max_tokens=80, temperature=0)
    if stream:
        calls, finish, content = tool_calls_of(client.chat.completions.create(stream=True, **kwargs))
    else:
        response = client.chat.completions.create(**kwargs)
        message, finish = response.choices[0].message, response.choices[0].finish_reason
        content = message.content or ""
        calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []]
    if calls:
        assert finish == "tool_calls"
        for call in calls:
            json.loads(call["arguments"])
    else:
        assert content and "<tool_call>" not in content.split("</tool_call>")[-1] and finish in ("stop", "length")


def test_a_two_turn_agent_loop(client):
    """call → the tool's result → an answer that uses it."""
    messages = list(ASK)
    first = client.chat.completions.create(model="small", messages=messages, tools=[WEATHER], tool_choice="required",
                                           max_tokens=60, temperature=0)
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "sunny"})})
    second = client.chat.completions.create(model="small", messages=messages, tools=[WEATHER], tool_choice="none",
                                            max_tokens=40, temperature=0)
    assert second.choices[0].message.content
    assert second.usage.prompt_tokens > first.usage.prompt_tokens  # the call and the result are in the prompt


# --- response_format ----------------------------------------------------------------------------------------------

def test_json_schema_over_50_seeded_samples_always_parses_and_validates(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    answers = []
    for seed in range(5):
        response = client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": "Describe a famous programmer as JSON."}],
            response_format=fmt, n=10, seed=seed, temperature=1.0, max_tokens=100)
        answers += [(c.message.content, c.finish_reason) for c in response.choices]
    assert len(answers) == 50
    for text, finish in answers:
        assert finish == "stop", text
        jsonschema.validate(json.loads(text), PERSON)


def test_json_object_gives_an_object(client):
    response = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "Give me a JSON object with your name."}],
        response_format={"type": "json_object"}, n=4, seed=1, temperature=0.7, max_tokens=100)
    for choice in response.choices:
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
        else:  # cut by max_tokens: still the start of an object
            assert choice.message.content.lstrip().startswith("{")


def test_streamed_json_schema_parses(client):
    stream = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "A programmer, as JSON."}], stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}, max_tokens=100,
        temperature=0)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), PERSON)


# --- real clients: LangChain ------------------------------------------------------------------------------------

def test_langchain_bind_tools_and_with_structured_output(server):
    """Bounded strings keep a 135M model's answers short enough to finish; the schema is LangChain's own."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    class WeatherArgs(BaseModel):
        city: str = Field(max_length=20, description="a city name")

    @tool(args_schema=WeatherArgs)
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return "sunny"

    class Person(BaseModel):
        name: str = Field(max_length=20)
        age: int = Field(ge=0, le=120)

    llm = ChatOpenAI(model="small", base_url=server.api_url, api_key="any", temperature=0, max_tokens=60,
                     max_retries=0)
    message = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert message.tool_calls and message.tool_calls[0]["name"] == "get_weather", message
    assert 0 < len(message.tool_calls[0]["args"]["city"]) <= 20
    person = llm.with_structured_output(Person).invoke("Invent a person.")
    assert isinstance(person, Person)


# --- remote tiers pass tools and formats through ------------------------------------------------------------------

def test_a_remote_tier_passes_tools_through_and_returns_the_calls(server):
    async def run() -> list:
        tier = RemoteTier.connect("small", server.api_url, model="small")
        options = ChatOptions(tools=(WEATHER,), tool_choice={"type": "function", "function": {"name": "get_weather"}})
        try:
            return [c async for c in tier.stream_chat(ASK, SamplingParams(max_tokens=60, temperature=0), "r1",
                                                      options=options)]
        finally:
            await tier.aclose()

    chunks = asyncio.run(run())
    deltas = [d for c in chunks for d in c.tool_calls or []]
    assert deltas and deltas[0].name == "get_weather" and deltas[0].id
    check_call("get_weather", "".join(d.arguments for d in deltas))
    assert chunks[-1].finish_reason == "tool_calls"


# --- sampling parameters and refusals -----------------------------------------------------------------------------

def test_logit_bias_and_penalties_change_the_answer(client):
    base = dict(model="small", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0)
    plain = client.chat.completions.create(**base).choices[0].message.content
    biased = client.chat.completions.create(logit_bias={"45": 100}, **base)  # token 45 is "="
    assert biased.choices[0].message.content == "=" * 8 != plain
    penalised = client.chat.completions.create(logit_bias={"45": 100}, frequency_penalty=2.0, presence_penalty=2.0,
                                               **{**base, "max_tokens": 3}).choices[0].message.content
    assert penalised.startswith("=")  # +100 outweighs the penalties of at most 2 * 3 + 2


@pytest.mark.parametrize("extra, param, code", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
     "response_format", "invalid_schema"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name", None),
    ({"tool_choice": "required"}, "tool_choice", None),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "unsupported_parameter"),
    ({"functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     "messages.0.content.0", "unsupported_parameter"),
    ({"messages": [*ASK, {"role": "tool", "content": "18 C"}]}, "messages.1.tool_call_id", None),
    ({"logit_bias": {"999999": 5}}, None, None),
])
def test_what_cannot_be_honoured_is_a_400_naming_the_field(server, extra, param, code):
    body = {"model": "small", "messages": ASK, "max_tokens": 5, **extra}
    response = httpx.post(server.api_url + "/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error


def test_models_retrieve_and_the_root_leads_to_the_dashboard(server, client):
    assert client.models.retrieve("auto").id == "auto"
    assert client.models.retrieve("small").id == "small"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-nope")
    response = httpx.get(server.base_url + "/", follow_redirects=False)
    assert response.status_code in (302, 307) and response.headers["location"] == "/dashboard"
