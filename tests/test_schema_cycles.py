"""Recursive JSON schemas: one with no finite instance is refused naming its $ref cycle, however its references
are written (`$id` URLs, relative `$id`s, anchors, percent-encoded or escaped pointers, `definitions`, a required
name that a patternProperties regex matches); recursion with a way out is kept, and the grammar library generates
valid, finite values for it. A hypothesis check holds the analysis to its promise: it never refuses a schema that
has an instance (the instance is built alongside the schema)."""
import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from test_engine_equality import make_prompts
from tiers import Engine, InvalidRequestError, SamplingParams, StructuredOutputParams
from tiers.engine.schema_cycles import MAX_DEPTH, SchemaTooDeepError, empty_ref_cycle

pytestmark = pytest.mark.usefixtures("one_thread")

SELF_REQUIRED = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
DEFS_CYCLE = {"$defs": {"A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}, "required": ["b"]},
                        "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"]}},
              "$ref": "#/$defs/A"}
ARRAY_CYCLE = {"type": "array", "minItems": 1, "items": {"$ref": "#"}}
TREE = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 4},
                                         "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#"}}},
        "required": ["name"], "additionalProperties": False}


@pytest.mark.parametrize("schema, cycle", [
    (SELF_REQUIRED, ["#", "#"]),
    (DEFS_CYCLE, ["#/$defs/A", "#/$defs/B", "#/$defs/A"]),
    (ARRAY_CYCLE, ["#", "#"]),
    ({"anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/A"}], "$defs": {"A": SELF_REQUIRED | {
        "properties": {"a": {"$ref": "#/$defs/A"}}}}}, ["#/$defs/A", "#/$defs/A"]),
])
def test_a_cycle_without_a_way_out_is_found(schema, cycle):
    assert empty_ref_cycle(schema) == cycle


ID_CYCLE = {"$id": "https://x.test/s", "type": "object", "properties": {"a": {"$ref": "https://x.test/s"}},
            "required": ["a"]}
ENCODED_CYCLE = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A%20B"}}, "required": ["a"],
                 "$defs": {"A B": {"$ref": "#"}}}
PATTERN_CYCLE = {"type": "object", "patternProperties": {"^a$": {"$ref": "#"}}, "required": ["a"]}


@pytest.mark.parametrize("schema, cycle", [
    (ID_CYCLE, ["https://x.test/s", "https://x.test/s"]),
    (ENCODED_CYCLE, ["#", "#/$defs/A%20B", "#"]),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/a~1b~0c"}}, "required": ["a"],
      "$defs": {"a/b~c": {"$ref": "#"}}}, ["#", "#/$defs/a~1b~0c", "#"]),
    ({"$defs": {"N": {"$anchor": "node", "type": "object", "properties": {"next": {"$ref": "#node"}},
                      "required": ["next"]}}, "$ref": "#node"}, ["#node", "#node"]),
    ({"definitions": {"A": {"type": "array", "minItems": 2, "items": {"$ref": "#/definitions/A"}}},
      "$ref": "#/definitions/A"}, ["#/definitions/A", "#/definitions/A"]),
    ({"$id": "https://x.test/root", "$defs": {"A": {"$id": "a.json", "type": "object",
                                                    "properties": {"b": {"$ref": "a.json"}}, "required": ["b"]}},
      "$ref": "a.json"}, ["a.json", "a.json"]),
    # "#" inside an embedded resource is that resource, not the document's root
    ({"type": "array", "minItems": 1, "items": {"$id": "https://x.test/t", "type": "object",
                                                "properties": {"n": {"$ref": "#"}}, "required": ["n"]}},
     ["#", "#"]),
    (PATTERN_CYCLE, ["#", "#"]),
    ({"type": "object", "properties": {"ab": {"type": "string"}}, "patternProperties": {"^a": {"$ref": "#"}},
      "required": ["ab"]}, ["#", "#"]),  # a named property must match the patterns that match its name too
])
def test_a_cycle_through_any_kind_of_reference_is_found(schema, cycle):
    assert empty_ref_cycle(schema) == cycle


@pytest.mark.parametrize("schema", [
    {"type": "object", "patternProperties": {"^b$": {"$ref": "#"}}, "required": ["a"]},  # no pattern matches "a"
    {"type": "object", "patternProperties": {"[": {"$ref": "#"}}, "required": ["a"]},  # a regex no one reads
    {"type": "object", "patternProperties": {"^\u00e9$": {"$ref": "#"}}, "required": ["\u00e9"]},  # not ASCII
    # catastrophic backtracking: the check's matching budget runs out, the answer is "unsure"
    {"type": "object", "patternProperties": {"^(a+)+$": {"$ref": "#"}}, "required": ["a" * 40 + "!"]},
    {"$id": "https://x.test/s", "type": "object", "properties": {"a": {"$ref": "https://x.test/other"}},
     "required": ["a"]},  # unresolvable: the grammar library refuses it, not this check
])
def test_what_the_check_cannot_be_sure_of_is_kept(schema):
    assert empty_ref_cycle(schema) is None


@pytest.mark.parametrize("schema", [
    TREE,
    {"type": "object", "properties": {"a": {"$ref": "#"}}},  # optional
    {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}]},
    {"type": "array", "items": {"$ref": "#"}},  # may be empty
    {"type": ["object", "null"], "properties": {"a": {"$ref": "#"}}, "required": ["a"]},  # null ends it
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"]},  # not ours to judge
    {"type": "string"},
])
def test_recursion_with_a_way_out_is_kept(schema):
    assert empty_ref_cycle(schema) is None


def test_a_schema_nested_too_deeply_is_refused():
    schema: dict = {"type": "string"}
    for _ in range(MAX_DEPTH + 2):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    with pytest.raises(SchemaTooDeepError):
        empty_ref_cycle({"$defs": {"A": schema}, "$ref": "#/$defs/A"})


@st.composite
def schema_with_instance(draw, depth=0):
    """(schema, one of its instances). Recursion is added only along optional properties or anyOf branches beside
    a branch that has an instance, so the schema always has a finite instance."""
    kind = draw(st.sampled_from(["string", "integer", "object", "array", "anyOf"] if depth < 3 else ["string"]))
    if kind == "string":
        return {"type": "string"}, "x"
    if kind == "integer":
        return {"type": "integer"}, 1
    if kind == "array":
        items, item = draw(schema_with_instance(depth + 1))
        return {"type": "array", "minItems": 1, "items": items}, [item]
    if kind == "anyOf":
        (left, value) = draw(schema_with_instance(depth + 1))
        right = {"type": "object", "properties": {"r": {"$ref": "#"}}, "required": ["r"]}  # endless alone
        return {"anyOf": [right, left] if draw(st.booleans()) else [left, right]}, value
    required, instance, properties = [], {}, {}
    for name in draw(st.lists(st.sampled_from("abc"), unique=True, max_size=3)):
        properties[name], instance[name] = draw(schema_with_instance(depth + 1))
        required.append(name)
    properties["self"] = {"$ref": "#"}  # optional: a way out
    schema = {"type": "object", "properties": properties, "required": required}
    if draw(st.booleans()):  # a required name that only a pattern gives a schema
        pattern_schema, instance["p1"] = draw(schema_with_instance(depth + 1))
        schema["patternProperties"] = {"^p[0-9]$": pattern_schema}
        required.append("p1")
    return schema, instance


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_with_instance())
def test_a_schema_with_an_instance_is_never_refused(pair):
    schema, instance = pair
    jsonschema.validate(instance, schema)
    assert empty_ref_cycle(schema) is None


@pytest.fixture(scope="module")
def engine(llama_path):
    return Engine.from_pretrained(llama_path, max_model_len=256)


@pytest.mark.parametrize("schema, named", [(SELF_REQUIRED, "# -> #"), (DEFS_CYCLE, "#/$defs/A -> #/$defs/B"),
                                           (ID_CYCLE, "https://x.test/s -> https://x.test/s"),
                                           (ENCODED_CYCLE, "# -> #/$defs/A%20B -> #"), (PATTERN_CYCLE, "# -> #")])
def test_the_engine_refuses_an_endless_schema_naming_its_cycle(engine, schema, named):
    params = StructuredOutputParams(json_schema=schema)
    with pytest.raises(InvalidRequestError, match=f"no finite instance.*{re.escape(named)}"):
        engine.check_structured_output(params)
    with pytest.raises(InvalidRequestError, match="no finite instance"):
        engine.add_request([5, 6, 7], SamplingParams(max_tokens=4, structured_output=params))
    assert not engine.has_unfinished_requests()


def test_a_recursive_tree_schema_generates_valid_finite_values(engine):
    prompts = make_prompts(engine.model_config.vocab_size)[:4]
    params = SamplingParams(max_tokens=120, temperature=1.0, seed=3,
                            structured_output=StructuredOutputParams(json_schema=TREE))
    for out in engine.generate(prompts, params):
        if out.finish_reason == "stop":
            jsonschema.validate(json.loads(out.text), TREE)
        else:  # a random model may nest until max_tokens: cut, never an error
            assert out.finish_reason == "length"
