"""The bounds on what reaches the grammar library (tiers/engine/schema_limits.py), each at its edge: a schema
exactly at a limit compiles, one past it is refused with a message naming the limit and the schema's value. And
every compile runs on its own stack: from a thread whose stack could not hold it, a chain that needs ~9 MiB of
native stack compiles (in a subprocess, so a regression fails the test instead of killing pytest)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiers import InvalidRequestError, StructuredOutputParams
from tiers.engine import schema_limits
from tiers.engine.schema_depth import expanded_depth
from tiers.engine.schema_limits import (MAX_JSON_NESTING, MAX_OBJECT_PROPERTIES, MAX_PATTERN_PROPERTIES,
                                        MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, check_shape,
                                        compact_json)
from tiers.engine.schema_refs import schema_graph
from tiers.engine.structured_output import GrammarCompiler

REPO = Path(__file__).resolve().parents[1]


def property_chain(links: int) -> dict:
    """The issue's probe: `links` $defs, each an object whose property refers to the next; depth 2 * links + 2."""
    defs = {f"D{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/D{i + 1}"}}} for i in range(links)}
    defs[f"D{links}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/D0"}


def alias_chain(links: int) -> dict:
    """`links` $defs that each only refer to the next: depth links + 2."""
    defs = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(links)}
    defs[f"D{links}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/D0"}


def padded(size: int) -> dict:
    """A schema whose compact JSON is exactly `size` bytes."""
    base = {"type": "string", "description": ""}
    return {"type": "string", "description": "x" * (size - len(json.dumps(base, separators=(",", ":"))))}


def nested_items(levels: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(levels - 1):
        schema = {"items": schema}
    return schema


def objects(count: int, key: str, make) -> dict:
    return {"type": "object", key: {make(i): {"type": "integer"} for i in range(count)}}


@pytest.fixture(scope="module")
def compiler(llama_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(llama_path)
    return GrammarCompiler(tokenizer, len(tokenizer), {tokenizer.eos_token_id})


def compile_schema(compiler, schema):
    return compiler.compile(StructuredOutputParams(json_schema=schema))


@pytest.mark.parametrize("make, links", [(property_chain, (MAX_SCHEMA_DEPTH - 2) // 2), (alias_chain,
                                                                                        MAX_SCHEMA_DEPTH - 2)])
def test_the_depth_limit_at_its_edge(compiler, make, links):
    at_limit = make(links)
    assert expanded_depth(schema_graph(at_limit)) == MAX_SCHEMA_DEPTH
    assert not compile_schema(compiler, at_limit).is_error()
    past = make(links + 1)
    value = expanded_depth(schema_graph(past))
    assert value > MAX_SCHEMA_DEPTH
    with pytest.raises(InvalidRequestError, match=f"nests {value:,} schema objects deep.*the limit is "
                                                  f"{MAX_SCHEMA_DEPTH:,}"):
        compile_schema(compiler, past)


def test_the_size_limit_at_its_edge(compiler):
    assert not compile_schema(compiler, padded(MAX_SCHEMA_BYTES)).is_error()
    with pytest.raises(InvalidRequestError, match=f"is {MAX_SCHEMA_BYTES + 1:,} bytes.*the limit is "
                                                  f"{MAX_SCHEMA_BYTES:,}"):
        compile_schema(compiler, padded(MAX_SCHEMA_BYTES + 1))


@pytest.mark.parametrize("make", [
    lambda n: {"type": "array", "prefixItems": [{"type": "integer"}] * (n - 1)},  # the root and n - 1 items
    lambda n: {"enum": [f"v{i}" for i in range(n - 2)]},  # the root, the enum array and its values
])
def test_the_node_limit_at_its_edge(compiler, make):
    assert not compile_schema(compiler, make(MAX_SCHEMA_NODES)).is_error()
    with pytest.raises(InvalidRequestError, match=f"has {MAX_SCHEMA_NODES + 1:,} nodes.*the limit is "
                                                  f"{MAX_SCHEMA_NODES:,}"):
        compile_schema(compiler, make(MAX_SCHEMA_NODES + 1))


@pytest.mark.parametrize("key, limit, name", [("properties", MAX_OBJECT_PROPERTIES, "p{}"),
                                              ("patternProperties", MAX_PATTERN_PROPERTIES, "^p{}_")])
def test_the_per_object_limits_at_their_edge(compiler, key, limit, name):
    assert not compile_schema(compiler, objects(limit, key, name.format)).is_error()
    inside = {"type": "array", "items": objects(limit + 1, key, name.format)}  # found wherever it sits
    with pytest.raises(InvalidRequestError, match=f"has {limit + 1:,} {key}; the limit is {limit:,} per object"):
        compile_schema(compiler, inside)


def test_the_nesting_limit_at_its_edge(compiler):
    assert not compile_schema(compiler, nested_items(MAX_JSON_NESTING)).is_error()
    with pytest.raises(InvalidRequestError, match=f"{MAX_JSON_NESTING + 1} deep; the limit is {MAX_JSON_NESTING}"):
        compile_schema(compiler, nested_items(MAX_JSON_NESTING + 1))
    with pytest.raises(InvalidRequestError, match="deeper than Python serialises"):
        compact_json(nested_items(5_000))


def test_values_in_enum_and_const_count_wherever_they_nest():
    check_shape({"const": [[1, 2]] * 1_666})  # the root, the array, 1,666 x (an array and 2 numbers): 5,000
    with pytest.raises(InvalidRequestError, match="has 5,001 nodes"):
        check_shape({"properties": {"a": {"const": [[1, 2]] * 1_666}}})  # one schema object more


def test_the_librarys_own_limits_are_passed_explicitly(compiler, monkeypatch):
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    assert not compile_schema(compiler, schema).is_error()
    monkeypatch.setitem(schema_limits.PARSER_LIMITS, "max_grammar_size", 3)
    with pytest.raises(InvalidRequestError, match="invalid JSON schema"):
        compile_schema(compiler, {**schema, "title": "not cached"})


STACK_SCRIPT = """
import sys, threading
from transformers import AutoTokenizer
from tiers.engine import schema_limits
from tiers.engine.sampling_params import StructuredOutputParams
from tiers.engine.structured_output import GrammarCompiler
from tests.test_schema_limits import property_chain

schema_limits.MAX_SCHEMA_DEPTH = 10 ** 9  # the bound off: only the compile thread's own stack holds the chain
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
compiler = GrammarCompiler(tokenizer, len(tokenizer), {tokenizer.eos_token_id})
outcome = {}
def call():
    outcome["error"] = compiler.compile(StructuredOutputParams(json_schema=property_chain(1_000))).is_error()
threading.stack_size(512 << 10)  # a caller whose stack could not hold the library's recursion
thread = threading.Thread(target=call)
thread.start()
thread.join()
print("compiled", outcome)
"""


def test_a_compile_runs_on_its_own_stack_whatever_thread_calls(llama_path):
    """The probe's 1,000-link chain needs ~9 MiB of native stack (it died on an 8 MiB main thread); with the depth
    bound lifted it still compiles when called from a 512 KiB thread."""
    done = subprocess.run([sys.executable, "-c", STACK_SCRIPT, str(llama_path)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "compiled {'error': False}" in done.stdout
