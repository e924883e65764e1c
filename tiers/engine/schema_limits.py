"""What a JSON schema may be before the grammar library (llguidance 1.9, native code) compiles it, and the stack it
compiles on. Each bound comes from measurements (`python -m benchmarks.schema_limits edges|times`; docs/engine.md
has the tables): past them the library overflowed its stack (a segfault: the whole server died) or took seconds.

Stack. The library compiles `$ref` chains and nested schemas recursively: 3.0 to 6.5 KiB of native stack per
schema object on the path, over 35 shapes measured (the most: 20 nested arrays with prefixItems and items per
`$defs` link). On an 8 MiB thread the worst shape died at 1,262 levels and the probe's property chain at 1,858
(928 links; the probe has 1,000). Every compile runs on a thread of its own with COMPILE_STACK_BYTES = 64 MiB,
whatever thread asks and whatever `ulimit -s` says: there the property chain survived 14,850 levels and a
50-deep prefixItems nesting per link 10,812.
MAX_SCHEMA_DEPTH = 1,000 levels, counted by schema_depth.expanded_depth (an upper bound on the path the library
walks): 10x below what 64 MiB holds for the worst shape (6.5 KiB x 1,000 = 6.5 MiB), and still below what 8 MiB
held. No schema written by hand or generated from types nests near it.

Time (SmolLM2's 49k vocabulary; one core of a shared, noisy 2-core machine, so timings vary up to 2x). The
library's own guards stop `allOf` and `$ref` blow-ups ("schema too large", "intersection stack level exceeded")
within 0.1 s, and a `$ref` DAG that doubles at each level is compiled once per definition (40 levels: 4 ms).
Otherwise the time grows with the schema; at these limits the slowest measured case took 0.9 s:
- MAX_SCHEMA_BYTES = 256 KiB of compact JSON: a 250 KB `const` compiles in 0.01 s, 4,998 enum strings in 0.03 s.
- MAX_SCHEMA_NODES = 5,000 schema objects and JSON values inside `enum` / `const`: the costly nodes (optional
  properties, number ranges, formats, enum objects) take 0.1 to 0.3 ms each: 4,999 date-time formats 0.76 s,
  4 x 1,000 optional properties 0.4 s, 1,249 enum objects 0.37 s, 4,000 number ranges stop at the library's lexer
  fuel after 0.87 s. Past it: 20,000 enum objects ran 5 to 7.6 s (then a panic in the library, caught).
- MAX_OBJECT_PROPERTIES = 1,000 per object: optional properties cost quadratically (1,000: 0.08 s; 5,000 in one
  object: 2 to 4 s).
- MAX_PATTERN_PROPERTIES = 16 per object: cubically (32: 9 ms; 160: 0.2 to 0.3 s; 1,000: over 60 s); 290 objects
  of 16 took 0.29 s, 150 of 32 0.5 to 1 s.
- MAX_JSON_NESTING = 124 objects and arrays: the library's JSON parser takes 127, 3 of which wrap the schema in
  its grammar; refused first here, with the schema's value, it also bounds the recursion of the checks in Python.
Huge `minLength`, `maxLength`, `minItems`, `maxItems`, integer ranges and regex repetition counts compile in
under 30 ms (the library counts instead of unrolling).

PARSER_LIMITS are the library's own limits on the grammar and on each token's mask (its defaults, passed
explicitly so an upgrade cannot loosen them), with short error messages.
"""
from __future__ import annotations

import json
import threading
from typing import Any, Callable, TypeVar

from tiers.engine.sampling_params import InvalidRequestError
from tiers.engine.schema_depth import expanded_depth
from tiers.engine.schema_refs import SchemaGraph, subschemas

COMPILE_STACK_BYTES = 64 << 20
MAX_SCHEMA_DEPTH = 1_000
MAX_SCHEMA_BYTES = 256 << 10
MAX_SCHEMA_NODES = 5_000
MAX_OBJECT_PROPERTIES = 1_000
MAX_PATTERN_PROPERTIES = 16
MAX_JSON_NESTING = 124
PARSER_LIMITS = {"max_items_in_row": 2_000, "initial_lexer_fuel": 1_000_000, "step_lexer_fuel": 200_000,
                 "step_max_items": 50_000, "max_lexer_states": 250_000, "max_grammar_size": 500_000,
                 "precompute_large_lexemes": True, "verbose_errors": False}

T = TypeVar("T")
_stack_lock = threading.Lock()


def parser_limits() -> Any:
    import llguidance

    return llguidance.LLParserLimits(**PARSER_LIMITS)


def compact_json(schema: Any) -> str:
    """The schema as the library gets it; InvalidRequestError past MAX_SCHEMA_BYTES (or nested past what Python
    serialises)."""
    try:
        text = json.dumps(schema, separators=(",", ":"))
    except RecursionError:
        raise InvalidRequestError(f"the JSON schema nests JSON objects and arrays deeper than Python serialises; the "
                                  f"limit is {MAX_JSON_NESTING}") from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise InvalidRequestError(f"the JSON schema is {len(text):,} bytes as compact JSON; the limit is "
                                  f"{MAX_SCHEMA_BYTES:,}")
    return text


def check_shape(schema: Any) -> None:
    """MAX_JSON_NESTING, MAX_SCHEMA_NODES, MAX_OBJECT_PROPERTIES and MAX_PATTERN_PROPERTIES: InvalidRequestError
    naming the first one exceeded and the schema's value."""
    nesting = _nesting(schema)
    if nesting > MAX_JSON_NESTING:
        raise InvalidRequestError(f"the JSON schema nests JSON objects and arrays {nesting} deep; the limit is "
                                  f"{MAX_JSON_NESTING}")
    nodes = 0
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        nodes += 1
        if not isinstance(node, dict):
            continue
        nodes += sum(_values(node[key]) for key in ("enum", "const") if key in node)
        for key, limit in (("properties", MAX_OBJECT_PROPERTIES), ("patternProperties", MAX_PATTERN_PROPERTIES)):
            count = len(node[key]) if isinstance(node.get(key), dict) else 0
            if count > limit:
                raise InvalidRequestError(f"an object of the JSON schema has {count:,} {key}; the limit is {limit:,} "
                                          "per object")
        stack.extend(sub for _, sub in subschemas(node))
    if nodes > MAX_SCHEMA_NODES:
        raise InvalidRequestError(f"the JSON schema has {nodes:,} nodes (schema objects, and values inside enum and "
                                  f"const); the limit is {MAX_SCHEMA_NODES:,}")


def check_depth(graph: SchemaGraph) -> None:
    depth = expanded_depth(graph)
    if depth > MAX_SCHEMA_DEPTH:
        raise InvalidRequestError(f"the JSON schema nests {depth:,} schema objects deep once its $refs are followed "
                                  f"(a recursion counted once); the limit is {MAX_SCHEMA_DEPTH:,}")


def on_compile_stack(work: Callable[[], T]) -> T:
    """Runs `work` on a new thread with a COMPILE_STACK_BYTES stack and returns (or raises) what it did."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    with _stack_lock:  # threading.stack_size is process-wide: set for this thread's start only
        previous = threading.stack_size(COMPILE_STACK_BYTES)
        try:
            thread = threading.Thread(target=run, name="grammar-compile", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _nesting(value: Any) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _values(value: Any) -> int:
    """JSON values in `value`, itself included."""
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count
