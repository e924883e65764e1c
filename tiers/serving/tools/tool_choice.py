"""What a request's tools and response_format make of its generation: the JSON schema guided decoding enforces,
and the parser that reads the answer."""
from __future__ import annotations

from typing import Any

from referencing.jsonschema import DRAFT202012, UnknownDialect, specification_with

from tiers.serving.tools.options import ChatOptions
from tiers.serving.tools.parsers import (HermesParser, Llama3JsonParser, NamedCallParser, RequiredCallsParser,
                                         ToolCallParser)

ANY_OBJECT: dict[str, Any] = {"type": "object"}
TOOL_ID = "https://aio.invalid/tools/{}/parameters"  # each function's parameters as a resource of its own
_DATA_KEYWORDS = ("const", "enum", "default", "examples")  # their values are JSON data, not schemas
_SCHEMA_MAP_KEYWORDS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def guided_schema(options: ChatOptions) -> dict[str, Any] | None:
    """The JSON schema the answer must match, or None for free text. A forced tool wins over response_format
    (the answer is then a call, not content); {"type": "json_object"} gives {"type": "object"}."""
    if options.tools and options.tool_choice == "required":
        return required_calls_schema(options)
    name = options.forced_function
    if name is not None:
        return _parameters(_function(options, name))
    fmt = options.response_format or {}
    if fmt.get("type") == "json_schema":
        return fmt["json_schema"].get("schema") or ANY_OBJECT
    if fmt.get("type") == "json_object":
        return None  # any JSON object: see wants_json_object
    return None


def wants_json_object(options: ChatOptions) -> bool:
    return (not options.tools or options.tool_choice in ("auto", "none")) \
        and (options.response_format or {}).get("type") == "json_object"


def required_calls_schema(options: ChatOptions) -> dict[str, Any]:
    """A JSON array of one call per item ({"name": one of the tools, "arguments": its parameters}): one item when
    parallel_tool_calls is false, else at most as many as there are tools. The grammar accepts the answer only
    once the array closes and nothing pulls a model towards `]`: unbounded, a small model repeats its call until
    max_tokens (SmolLM2 does, on the plainest prompt), so the array has a bound. One call per tool fits what a turn
    of an agent asks for; a model that wants one function for several arguments makes the other calls in later
    turns, after it has seen the results. A function's local `$ref`s (a Pydantic model's "#/$defs/...", "#" itself,
    "#anchor") keep meaning what they meant in its parameters (see _embedded)."""
    functions = options.functions
    item = "#/items" if len(functions) == 1 else "#/items/anyOf/{}"  # where each function's call lives
    variants = [{"type": "object",
                 "properties": {"name": {"const": f["name"]},
                                "arguments": _embedded(_parameters(f), TOOL_ID.format(i),
                                                       item.format(i) + "/properties/arguments")},
                 "required": ["name", "arguments"], "additionalProperties": False}
                for i, f in enumerate(functions)]
    return {"type": "array", "minItems": 1, "maxItems": len(variants) if options.parallel_tool_calls else 1,
            "items": variants[0] if len(variants) == 1 else {"anyOf": variants}}


def make_parser(options: ChatOptions | None, native_format: str) -> ToolCallParser | None:
    """The parser for the answer, or None when it can only be content."""
    if options is None or not options.calls_tools:
        return None
    if options.tool_choice == "required":
        return RequiredCallsParser()
    if options.forced_function is not None:
        return NamedCallParser(options.forced_function)
    if (options.response_format or {}).get("type", "text") != "text":
        return None  # guided by response_format: the answer is content
    return Llama3JsonParser() if native_format == "llama3_json" else HermesParser()


def _function(options: ChatOptions, name: str) -> dict[str, Any]:
    for function in options.functions:
        if function["name"] == name:
            return function
    raise ValueError(f"tool_choice names the function {name!r}, which is not among the tools")


def _parameters(function: dict[str, Any]) -> dict[str, Any]:
    """The arguments schema a forced call is held to: the function's parameters, closed to the declared ones
    (an argument the function does not declare is an error in the caller, not a call) unless the schema says
    otherwise, as OpenAI's strict mode does."""
    parameters = function.get("parameters") or ANY_OBJECT
    if parameters.get("type") == "object" and "properties" in parameters and "additionalProperties" not in parameters:
        return {**parameters, "additionalProperties": False}
    return parameters


def _embedded(parameters: dict[str, Any], uri: str, base: str) -> dict[str, Any]:
    """A function's parameters as they sit inside the calls array's schema. Given an `$id` of their own (`uri`,
    unless they have one), their `$ref`s resolve inside them as they did at the root, anchors included (the
    grammar library and `jsonschema` follow embedded resources). A draft that ignores `$id` beside a root `$ref`
    (draft 7, as zod-to-json-schema writes) gets its JSON-pointer `$ref`s rewritten to `base` instead."""
    if _id_of(parameters) is not None:
        return parameters
    identified = {"$id": uri, **parameters}
    return identified if _id_of(identified) == uri else _relocated(parameters, base)


def _id_of(schema: dict[str, Any]) -> str | None:
    dialect = schema.get("$schema")
    try:
        specification = specification_with(dialect if isinstance(dialect, str) else "", default=DRAFT202012)
    except UnknownDialect:
        specification = DRAFT202012
    found = specification.id_of(schema)
    return found if isinstance(found, str) else None


def _relocated(schema: Any, base: str, top: bool = True) -> Any:
    """A function's parameters schema moved to the JSON pointer `base` of the calls array's schema: its JSON-pointer
    `$ref`s ("#/$defs/Place", "#" itself), written against the parameters as the root, point where they now are.
    Anchors ("#name") resolve anywhere in the document and stay; so does what an embedded `$id` scopes."""
    if isinstance(schema, list):
        return [_relocated(s, base, False) for s in schema]
    if not isinstance(schema, dict) or (not top and _id_of(schema) is not None):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            out[key] = base + value[1:]
        elif key in _DATA_KEYWORDS:
            out[key] = value
        elif key in _SCHEMA_MAP_KEYWORDS and isinstance(value, dict):  # names (any word) → schemas
            out[key] = {name: _relocated(sub, base, False) for name, sub in value.items()}
        else:
            out[key] = _relocated(value, base, False)
    return out
