"""Fuzzed JSON schemas through the engine's real compile (the checks, then llguidance): `$defs` reached through
encoded and escaped pointers, anchors, absolute and relative `$id`s and "#"; ref chains long enough to cross the
depth bound; cycles with and without a way out; pattern properties with required names; nested combinators and
keywords the library does not implement. Each one compiles or is refused with InvalidRequestError: never any
other exception (and never a crash)."""
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tiers import InvalidRequestError, StructuredOutputParams
from tiers.engine.structured_output import GrammarCompiler

LEAVES = [{"type": "string"}, {"type": "integer", "minimum": 0}, {"type": "null"}, {"enum": ["a", 1, None]},
          {"const": {"k": [1]}}, True, False, {"type": "string", "pattern": "^[a-z]+$"}, {"not": {"type": "null"}}]
NAMES = ["A", "B c", "d/e", "f~g", "h%i", "\u00e9"]


@st.composite
def fuzzed_schema(draw) -> dict:
    num_defs = draw(st.integers(0, 5))
    names = [f"{draw(st.sampled_from(NAMES))}{i}" for i in range(num_defs)]
    ids = {name: draw(st.sampled_from([None, f"https://x.test/d{i}", f"rel/d{i}.json"]))
           for i, name in enumerate(names)}

    def ref() -> dict:
        if not names or draw(st.integers(0, 9)) == 0:
            return {"$ref": "#"}
        i = draw(st.integers(0, len(names) - 1))
        name = names[i]
        ways = [f"#/$defs/{quote(name.replace('~', '~0').replace('/', '~1'), safe='~')}", f"#a{i}"]
        if ids[name] is not None:
            ways.append(ids[name])
        return {"$ref": draw(st.sampled_from(ways))}

    chains: dict = {}  # flat $defs links (a deeply nested value would be too deep for hypothesis to print)

    def body(depth: int):
        kind = draw(st.sampled_from(["leaf", "ref", "object", "array", "anyOf", "allOf", "pattern", "chain"]
                                    if depth < 3 else ["leaf", "ref"]))
        if kind == "leaf":
            return draw(st.sampled_from(LEAVES))
        if kind == "ref":
            return ref()
        if kind == "object":
            names_here = draw(st.lists(st.sampled_from("abc"), unique=True, max_size=3))
            return {"type": "object", "properties": {n: body(depth + 1) for n in names_here},
                    "required": draw(st.lists(st.sampled_from(names_here), unique=True)) if names_here else [],
                    "additionalProperties": draw(st.sampled_from([True, False, {"type": "integer"}]))}
        if kind == "array":
            return {"type": "array", "items": body(depth + 1), "minItems": draw(st.integers(0, 2))}
        if kind in ("anyOf", "allOf"):
            return {kind: [body(depth + 1) for _ in range(draw(st.integers(1, 3)))]}
        if kind == "pattern":
            return {"type": "object", "patternProperties": {"^p": body(depth + 1), "[0-9]$": body(depth + 1)},
                    "required": draw(st.lists(st.sampled_from(["p1", "q2", "x"]), unique=True))}
        links = draw(st.sampled_from([1, 10, 300, 600]))  # past 499 property links: over the depth bound
        first = len(chains)
        for i in range(first, first + links):
            chains[f"L{i}"] = {"type": "object", "properties": {"x": {"$ref": f"#/$defs/L{i + 1}"}}}
        chains[f"L{first + links}"] = body(depth + 1)
        return {"$ref": f"#/$defs/L{first}"}

    defs = {}
    for i, name in enumerate(names):
        schema = body(0)
        if isinstance(schema, dict):
            schema = {**schema, "$anchor": f"a{i}", **({"$id": ids[name]} if ids[name] else {})}
        defs[name] = schema
    root = body(0)
    root = root if isinstance(root, dict) else {"allOf": [root]}
    return {**root, "$defs": {**chains, **defs}} if defs or chains else root


@pytest.fixture(scope="module")
def compiler(llama_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(llama_path)
    return GrammarCompiler(tokenizer, len(tokenizer), {tokenizer.eos_token_id})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(schema=fuzzed_schema())
def test_a_schema_compiles_or_is_refused_as_the_requests_error(compiler, schema):
    try:
        matcher = compiler.compile(StructuredOutputParams(json_schema=schema))
    except InvalidRequestError:
        return
    assert not matcher.is_error()
