"""Tool-call parsing of a model's streamed text, the tool prompt given to chat templates, and the JSON schemas
that enforce tool_choice."""
from __future__ import annotations

import json

import jsonschema
import llguidance
import pytest
from hypothesis import given, settings, strategies as st

from tiers.serving.pool import ChatChunk
from tiers.serving.tools.local import ChunkParser
from tiers.serving.tools.options import ChatOptions
from tiers.serving.tools.parsers import HermesParser, Llama3JsonParser, NamedCallParser, RequiredCallsParser
from tiers.serving.tools.prompt import FALLBACK_TOOL_PROMPT, TemplateTools, render_messages
from tiers.serving.tools.tool_choice import guided_schema, make_parser, required_calls_schema

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def run(parser, pieces: list[str]) -> tuple[str, list[dict]]:
    """Feeds the pieces, then finishes; returns the content and the calls folded from their deltas."""
    content, calls = "", []
    for delta in [parser.feed(p) for p in pieces] + [parser.finish()]:
        content += delta.content
        for d in delta.tool_calls:
            if d.index == len(calls):
                assert d.id is not None and d.id.startswith("call_") and d.name is not None
                calls.append({"name": d.name, "arguments": ""})
            calls[d.index]["arguments"] += d.arguments
    return content, calls


def splits(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


HERMES_TEXT = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')


def test_hermes_content_then_calls():
    content, calls = run(HermesParser(), [HERMES_TEXT])
    assert content == "Let me check.\n"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"}),
                                                                         ("get_time", {})]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=500), max_size=12))
def test_hermes_any_split_parses_the_same(cuts):
    assert run(HermesParser(), splits(HERMES_TEXT, cuts)) == run(HermesParser(), [HERMES_TEXT])


def test_hermes_streams_content_before_the_tag_and_holds_a_partial_tag():
    parser = HermesParser()
    assert parser.feed("Hello <tool").content == "Hello "  # "<tool" may begin a tag: held
    assert parser.feed("box> world").content == "<toolbox> world"  # it did not


def test_hermes_plain_answer_and_broken_block_are_content():
    assert run(HermesParser(), ["The capital is Paris."]) == ("The capital is Paris.", [])
    text = "<tool_call>{not json}</tool_call>"
    assert run(HermesParser(), [text]) == (text, [])


def test_hermes_unterminated_block_at_the_end_still_a_call():
    content, calls = run(HermesParser(), ['<tool_call>{"name": "get_time", "arguments": {}}'])
    assert content == "" and calls == [{"name": "get_time", "arguments": "{}"}]


def test_llama3_json_calls_and_content():
    text = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; {"name": "get_time", "parameters": {}}'
    content, calls = run(Llama3JsonParser(), splits(text, [3, 9, 20, 40]))
    assert content == "" and [c["name"] for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Oslo"}
    assert run(Llama3JsonParser(), ["Sure", ", it is 4."]) == ("Sure, it is 4.", [])
    assert run(Llama3JsonParser(), ['{"answer": 4}']) == ('{"answer": 4}', [])  # JSON, but not a call


def test_named_call_streams_argument_fragments():
    parser = NamedCallParser("get_weather")
    first = parser.feed('{"city"')
    assert first.tool_calls[0].name == "get_weather" and first.tool_calls[0].id.startswith("call_")
    second = parser.feed(': "Rome"}')
    assert second.tool_calls[0].id is None and second.tool_calls[0].arguments == ': "Rome"}'
    assert parser.finish().tool_calls == [] and parser.num_calls == 1


REQUIRED_TEXT = '[{"name":"get_time","arguments":{}},{"name":"get_weather","arguments":{"city":"Li\\"ma}"}}]'


def test_required_calls_are_emitted_as_each_object_closes():
    parser = RequiredCallsParser()
    assert parser.feed('[{"name":"get_time","arguments":{}').tool_calls == []
    first = parser.feed('},{"name":"get_weather"')
    assert [(d.index, d.name, d.arguments) for d in first.tool_calls] == [(0, "get_time", "{}")]
    second = parser.feed(',"arguments":{"city":"Lima"}}]')
    assert [(d.index, d.name, json.loads(d.arguments)) for d in second.tool_calls] == [
        (1, "get_weather", {"city": "Lima"})]
    assert parser.finish().content == "" and parser.num_calls == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=500), max_size=12))
def test_required_any_split_parses_the_same(cuts):
    content, calls = run(RequiredCallsParser(), splits(REQUIRED_TEXT, cuts))
    assert content == "" and [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_time", {}), ("get_weather", {"city": 'Li"ma}'})]  # braces and quotes inside strings are text


def test_a_cut_answer_keeps_its_complete_calls_and_no_content():
    assert run(RequiredCallsParser(), [REQUIRED_TEXT[:60]]) == ("", [{"name": "get_time", "arguments": "{}"}])
    assert run(RequiredCallsParser(), ['[{"name": "get_ti']) == ("", [])


def test_an_exact_repeat_of_a_call_is_dropped():
    call = '{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}'
    same = '{"name":"get_weather","arguments":{"unit":"c","city":"Paris"}}'  # the same arguments in another order
    other = '{"name":"get_weather","arguments":{"city":"Rome","unit":"c"}}'
    content, calls = run(RequiredCallsParser(), [f"[{call},{same},{other},{call}]"])
    assert content == "" and [json.loads(c["arguments"])["city"] for c in calls] == ["Paris", "Rome"]


def test_a_chunk_parser_says_tool_calls_for_a_finished_answer_and_keeps_length_for_a_cut_one():
    def chunks(text: str, reason: str) -> list[ChatChunk]:
        return [ChatChunk(delta_text=text[:40]), ChatChunk(delta_text=text[40:], finish_reason=reason)]

    for reason, expected in (("stop", "tool_calls"), ("length", "length")):
        parser = ChunkParser(RequiredCallsParser())
        out = [parser.apply(c) for c in chunks(REQUIRED_TEXT if reason == "stop" else REQUIRED_TEXT[:60], reason)]
        assert [c.delta_text for c in out] == ["", ""] and out[-1].finish_reason == expected
        assert [d.name for c in out for d in c.tool_calls or []] == (
            ["get_time", "get_weather"] if reason == "stop" else ["get_time"])


def test_an_answer_that_is_not_an_array_is_content():
    assert run(RequiredCallsParser(), ["  Sor", "ry, no."]) == ("  Sorry, no.", [])


def test_guided_schemas_follow_tool_choice():
    tools = (WEATHER, TIME)
    named = ChatOptions(tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert guided_schema(named) == {**WEATHER["function"]["parameters"], "additionalProperties": False}
    open_schema = {"type": "object", "properties": {}, "additionalProperties": True}
    opened = {"type": "function", "function": {"name": "f", "parameters": open_schema}}
    assert guided_schema(ChatOptions(tools=(opened,), tool_choice={"type": "function", "function": {"name": "f"}})
                         ) == open_schema  # a schema that says otherwise is kept
    required = ChatOptions(tools=tools, tool_choice="required", parallel_tool_calls=False)
    schema = guided_schema(required)
    assert schema == required_calls_schema(required) and schema["maxItems"] == 1 and schema["minItems"] == 1
    assert [v["properties"]["name"]["const"] for v in schema["items"]["anyOf"]] == ["get_weather", "get_time"]
    assert guided_schema(ChatOptions(tools=tools, tool_choice="required"))["maxItems"] == 2  # one per tool
    assert guided_schema(ChatOptions(tools=tools)) is None  # auto: free text, parsed
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array"}}}
    assert guided_schema(ChatOptions(response_format=fmt)) == {"type": "array"}
    with pytest.raises(ValueError, match="not among the tools"):
        guided_schema(ChatOptions(tools=tools, tool_choice={"type": "function", "function": {"name": "nope"}}))


def test_required_keeps_a_functions_local_refs_working():
    """A Pydantic model's parameters use "#/$defs/..." refs, written against the parameters as the root; inside
    the calls array they must point where the parameters now are (a property may be called "default")."""
    place = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    parameters = {"type": "object", "$defs": {"Place": place}, "required": ["default"],
                  "properties": {"default": {"$ref": "#/$defs/Place"},
                                 "via": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}
    book = {"type": "function", "function": {"name": "book", "parameters": parameters}}
    for tools in ((book,), (WEATHER, book)):
        schema = required_calls_schema(ChatOptions(tools=tools, tool_choice="required"))
        assert llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema))) == ""
        jsonschema.validate([{"name": "book", "arguments": {"default": {"city": "Oslo"},
                                                            "via": {"default": {"city": "Rome"}, "via": None}}}],
                            schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate([{"name": "book", "arguments": {"default": {"town": "Oslo"}}}], schema)


@pytest.fixture(scope="module")
def calls_compiler(llama_path):
    """The engine's schema compiler (its checks, then llguidance) on a real tokenizer, and that tokenizer as
    llguidance reads it: a matcher shows what the grammar accepts."""
    import llguidance.hf
    from transformers import AutoTokenizer

    from tiers.engine.structured_output import GrammarCompiler

    tokenizer = AutoTokenizer.from_pretrained(llama_path)
    return GrammarCompiler(tokenizer, len(tokenizer), {tokenizer.eos_token_id}), llguidance.hf.from_tokenizer(tokenizer)


def accepted(calls_compiler, schema: dict, answer: list) -> bool:
    from tiers.engine.sampling_params import StructuredOutputParams

    compiler, tokenizer = calls_compiler
    matcher = compiler.compile(StructuredOutputParams(json_schema=schema)).deep_copy()
    tokens = tokenizer.tokenize_str(json.dumps(answer, separators=(",", ":")))
    return matcher.consume_tokens(tokens) and matcher.is_accepting()


def function(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def anchored(kind: str) -> dict:
    return {"type": "object", "properties": {"p": {"$ref": "#value"}}, "required": ["p"],
            "$defs": {"V": {"$anchor": "value", "type": kind}}}


@pytest.mark.parametrize("tools, calls, wrong", [
    # the same anchor name in two functions: each one's "#value" is its own (it was rewritten to a pointer)
    ((function("count", anchored("integer")), function("name", anchored("string"))),
     [{"name": "count", "arguments": {"p": 5}}, {"name": "name", "arguments": {"p": "x"}}],
     [{"name": "count", "arguments": {"p": "x"}}]),
    # zod-to-json-schema's draft 7: a root $ref beside $schema, where $id is ignored (pointers rewritten instead)
    ((function("zod", {"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "#/definitions/Args",
                       "definitions": {"Args": {"type": "object", "properties": {"q": {"type": "integer"}},
                                                "required": ["q"], "additionalProperties": False}}}), WEATHER),
     [{"name": "zod", "arguments": {"q": 1}}], [{"name": "zod", "arguments": {"q": "x"}}]),
    # parameters with an $id of their own keep it, and their refs resolve inside them
    ((function("own", {"$id": "https://example.test/own", "type": "object", "required": ["p"],
                       "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {"type": "boolean"}}}), TIME),
     [{"name": "own", "arguments": {"p": True}}], [{"name": "own", "arguments": {"p": 1}}]),
])
def test_required_keeps_every_kind_of_local_ref_of_each_function(calls_compiler, tools, calls, wrong):
    """Checked by llguidance's own matcher (the grammar the model is held to) and by jsonschema."""
    schema = required_calls_schema(ChatOptions(tools=tools, tool_choice="required"))
    for call in calls:
        assert accepted(calls_compiler, schema, [call])
        jsonschema.validate([call], schema)
    assert not accepted(calls_compiler, schema, wrong)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema)


def test_parser_choice():
    assert make_parser(None, "hermes") is None
    assert make_parser(ChatOptions(tools=(WEATHER,), tool_choice="none"), "hermes") is None
    assert isinstance(make_parser(ChatOptions(tools=(WEATHER,)), "hermes"), HermesParser)
    assert isinstance(make_parser(ChatOptions(tools=(WEATHER,)), "llama3_json"), Llama3JsonParser)
    assert isinstance(make_parser(ChatOptions(tools=(WEATHER,), tool_choice="required"), "hermes"),
                      RequiredCallsParser)


def test_template_detection():
    assert TemplateTools.of("{{ messages }}") == TemplateTools(native=False, parser="hermes")
    assert TemplateTools.of("{% if tools %}<tool_call>{% endif %}") == TemplateTools(native=True, parser="hermes")
    assert TemplateTools.of("{% if tools %}<|python_tag|>ipython{% endif %}").parser == "llama3_json"


HISTORY = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": "", "tool_calls": [
               {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
           {"role": "tool", "content": "18 C, sunny", "tool_call_id": "call_1"}]


def test_fallback_prompt_renders_tools_calls_and_results_as_text():
    messages, tools = render_messages(HISTORY, ChatOptions(tools=(WEATHER,)), TemplateTools(False, "hermes"))
    assert tools is None
    assert messages[0]["role"] == "system" and json.dumps(WEATHER) in messages[0]["content"]
    assert messages[0]["content"].startswith(FALLBACK_TOOL_PROMPT.split("{tools}")[0])
    assert messages[2] == {"role": "assistant", "content":
                           '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'}
    assert messages[3] == {"role": "user", "content": "<tool_response>\n18 C, sunny\n</tool_response>"}
    # the parser reads back what the prompt shows the model
    assert run(HermesParser(), [messages[2]["content"]])[1] == [{"name": "get_weather",
                                                                 "arguments": '{"city": "Paris"}'}]


def test_native_templates_get_tools_and_argument_objects():
    messages, tools = render_messages(HISTORY, ChatOptions(tools=(WEATHER,)), TemplateTools(True, "hermes"))
    assert tools == [WEATHER]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert messages[2] == HISTORY[2]


def test_native_template_renders_with_transformers():
    """A real tool-aware template (Qwen2.5's shape) renders the tools and the history through transformers."""
    from transformers import PreTrainedTokenizerFast
    from tiers.checkpoints import build_tokenizer

    tokenizer: PreTrainedTokenizerFast = build_tokenizer()
    tokenizer.chat_template = (
        "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
        "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function.name }}"
        "{{ c.function.arguments | tojson }}</tool_call>{% endfor %}{% else %}[{{ m.role }}]{{ m.content }}"
        "{% endif %}{% endfor %}")
    messages, tools = render_messages(HISTORY, ChatOptions(tools=(WEATHER, TIME)),
                                      TemplateTools.of(tokenizer.chat_template))
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert text == ('<tools>get_weather;get_time;</tools>[user]Weather in Paris?'
                    '<tool_call>get_weather{"city": "Paris"}</tool_call>[tool]18 C, sunny')
