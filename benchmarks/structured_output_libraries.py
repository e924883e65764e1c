"""xgrammar vs llguidance on the real SmolLM2 tokenizer (vocabulary 49,152): the measurement behind the engine's
choice of grammar library (see docs/engine.md, "Structured outputs").

    python -m benchmarks.structured_output --libraries   (this module's run(); needs both libraries installed)

Measured per library, single-threaded compilation, compact JSON (no free whitespace, separators "," and ":") as the engine uses it:
- compile time of a typical tool schema (a weather tool: nested object, enum, array, required) and of "any JSON
  object", median of 5 fresh compilations (the tokenizer preprocessing is done once, before, and not counted);
- per-token mask time: a matcher walks the tokens of a valid instance, filling the vocabulary bitmask before each
  token (the work the engine does per constrained row and step), mean per token;
- coverage: which of SCHEMAS compile, and whether a valid instance of each is accepted token by token;
- soundness: whether a JSON string (bounded by maxLength, and unbounded) lets through a raw control character
  (byte 0x15) or a UTF-16 surrogate (bytes ED A3 BF), neither valid JSON / UTF-8, fed as byte-level tokens.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

WEATHER_TOOL = {
    "type": "object",
    "properties": {
        "location": {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
                     "required": ["city"], "additionalProperties": False},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "array", "items": {"type": "string", "enum": ["today", "tomorrow", "weekend"]},
                 "minItems": 1, "maxItems": 3},
        "include_wind": {"type": "boolean"},
    },
    "required": ["location", "unit", "days"],
    "additionalProperties": False,
}
WEATHER_INSTANCE = {"location": {"city": "Paris", "country": "France"}, "unit": "celsius",
                    "days": ["today", "tomorrow"], "include_wind": True}

# (name, schema, a valid instance)
SCHEMAS: list[tuple[str, dict, Any]] = [
    ("weather tool", WEATHER_TOOL, WEATHER_INSTANCE),
    ("flat object", {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                     "required": ["name", "age"]}, {"name": "Ada", "age": 36}),
    ("$ref/$defs", {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"},
                                                                          "y": {"type": "number"}},
                                        "required": ["x", "y"]}},
                    "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
                    "required": ["a", "b"]}, {"a": {"x": 1, "y": 2.5}, "b": {"x": -3, "y": 0}}),
    ("anyOf", {"anyOf": [{"type": "string"}, {"type": "integer"}]}, 7),
    ("oneOf", {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                         {"type": "object", "properties": {"kind": {"const": "b"}, "n": {"type": "integer"}},
                          "required": ["kind", "n"]}]}, {"kind": "b", "n": 3}),
    ("enum", {"enum": ["red", "green", "blue", 3, None]}, "green"),
    ("const", {"type": "object", "properties": {"v": {"const": "fixed"}}, "required": ["v"]}, {"v": "fixed"}),
    ("pattern", {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "ABC-1234"),
    ("minItems/maxItems", {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4}, [1, 2, 3]),
    ("additionalProperties false", {"type": "object", "properties": {"q": {"type": "string"}},
                                    "additionalProperties": False}, {"q": "x"}),
    ("format date-time", {"type": "string", "format": "date-time"}, "2026-11-23T17:30:00Z"),
    ("format email", {"type": "string", "format": "email"}, "ada@example.com"),
    ("integer range", {"type": "integer", "minimum": 1, "maximum": 100}, 42),
    ("string length", {"type": "string", "minLength": 2, "maxLength": 5}, "abcd"),
    ("nested arrays", {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}, [[1.5], [2, 3]]),
    ("recursive tree", {"$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"]}}, "$ref": "#/$defs/node"}, {"value": 1, "children": [{"value": 2}]}),
]


@dataclass
class LibraryResult:
    name: str
    version: str
    tokenizer_setup_s: float
    tool_compile_ms: float
    json_object_compile_ms: float
    mask_us_per_token: float
    coverage: dict[str, str] = field(default_factory=dict)  # schema name -> "ok" | "compile error: ..." | ...
    soundness: dict[str, str] = field(default_factory=dict)  # probe -> "rejected" (sound) | "ACCEPTED"


class Adapter:
    """compile(schema or None for any object) -> grammar; matcher(grammar) -> m; fill(m, bitmask);
    accept(m, token) -> bool."""
    name: str
    version: str
    compile: Callable[[dict | None], Any]
    matcher: Callable[[Any], Any]
    fill: Callable[[Any, Any], None]
    accept: Callable[[Any, int], bool]
    bitmask: Any


def xgrammar_adapter(tokenizer: Any, vocab_size: int, eos: int) -> Adapter:
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=[eos])
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    a = Adapter()
    a.name, a.version = "xgrammar", xgr.__version__ if hasattr(xgr, "__version__") else _version("xgrammar")
    a.compile = lambda s: (compiler.compile_builtin_json_grammar() if s is None else
                           compiler.compile_json_schema(json.dumps(s), any_whitespace=False,
                                                         separators=(",", ":")))
    a.matcher = xgr.GrammarMatcher
    a.bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    a.fill = lambda m, b: m.fill_next_token_bitmask(b, 0)
    a.accept = lambda m, t: m.accept_token(t)
    return a


def llguidance_adapter(tokenizer: Any, vocab_size: int, eos: int) -> Adapter:
    import llguidance
    import llguidance.hf
    import llguidance.torch

    lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=eos)
    compact = {"x-guidance": {"whitespace_flexible": False}}

    def compile_(schema: dict | None) -> Any:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps({**(schema or {"type": "object"}),
                                                                           **compact}))
        matcher = llguidance.LLMatcher(lltok, grammar)  # llguidance compiles lazily: a matcher does the work
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return grammar

    a = Adapter()
    a.name, a.version = "llguidance", _version("llguidance")
    a.compile = compile_
    a.matcher = lambda g: llguidance.LLMatcher(lltok, g)
    a.bitmask = llguidance.torch.allocate_token_bitmask(1, vocab_size)
    a.fill = lambda m, b: llguidance.torch.fill_next_token_bitmask(m, b, 0)
    a.accept = lambda m, t: m.consume_token(t) and not m.is_error()
    return a


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _version(dist: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(dist)


def measure(make: Callable[[Any, int, int], Adapter], tokenizer: Any, vocab_size: int, eos: int) -> LibraryResult:
    start = time.perf_counter()
    a = make(tokenizer, vocab_size, eos)
    setup = time.perf_counter() - start
    tool_ms = _median_ms(lambda: a.compile(WEATHER_TOOL))
    object_ms = _median_ms(lambda: a.compile(None))
    tokens = tokenizer.encode(compact(WEATHER_INSTANCE), add_special_tokens=False)
    grammar = a.compile(WEATHER_TOOL)
    mask_s = []
    for _ in range(3):
        m = a.matcher(grammar)
        for t in tokens:
            t0 = time.perf_counter()
            a.fill(m, a.bitmask)
            mask_s.append(time.perf_counter() - t0)
            assert a.accept(m, t), f"{a.name} rejected the weather instance at token {t}"
    result = LibraryResult(a.name, a.version, setup, tool_ms, object_ms, statistics.mean(mask_s) * 1e6)
    for name, schema, instance in SCHEMAS:
        result.coverage[name] = _coverage(a, tokenizer, schema, instance)
    result.soundness = _soundness(a, tokenizer)
    return result


def _soundness(a: Adapter, tokenizer: Any) -> dict[str, str]:
    from tiers.models.gguf.tokenizer import bytes_to_unicode

    byte_token = {b: tokenizer.convert_tokens_to_ids(ch) for b, ch in bytes_to_unicode().items()}
    start = [byte_token[ord('"')], byte_token[ord("a")]]
    probes = {"control char": [0x15], "surrogate": [0xED, 0xA3, 0xBF]}
    out = {}
    for schema_name, schema in (("maxLength", {"type": "string", "maxLength": 8}), ("plain", {"type": "string"})):
        for probe, data in probes.items():
            m = a.matcher(a.compile(schema))
            ok = all(a.accept(m, t) for t in start + [byte_token[b] for b in data])
            out[f"{probe} in {schema_name} string"] = "ACCEPTED" if ok else "rejected"
    return out


def _coverage(a: Adapter, tokenizer: Any, schema: dict, instance: Any) -> str:
    try:
        grammar = a.compile(schema)
    except Exception as exc:  # the library's own message is the finding
        return f"compile error: {str(exc).splitlines()[0][:80]}"
    m = a.matcher(grammar)
    for t in tokenizer.encode(compact(instance), add_special_tokens=False):
        if not a.accept(m, t):
            return "compiles, rejects a valid instance"
    return "ok"


def _median_ms(fn: Callable[[], Any], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run(tokenizer: Any, vocab_size: int, eos: int) -> list[LibraryResult]:
    results = []
    for make in (xgrammar_adapter, llguidance_adapter):
        try:
            results.append(measure(make, tokenizer, vocab_size, eos))
        except ImportError as exc:
            print(f"skipped: {exc}")
    return results


def report(results: list[LibraryResult]) -> None:
    print(f"{'library':<12}{'version':<10}{'tokenizer setup s':>18}{'tool compile ms':>16}"
          f"{'json_object ms':>15}{'mask us/token':>14}{'schemas ok':>11}")
    for r in results:
        ok = sum(v == "ok" for v in r.coverage.values())
        print(f"{r.name:<12}{r.version:<10}{r.tokenizer_setup_s:>18.2f}{r.tool_compile_ms:>16.2f}"
              f"{r.json_object_compile_ms:>15.2f}{r.mask_us_per_token:>14.1f}{ok:>6}/{len(r.coverage)}")
    for name, _, _ in SCHEMAS:
        print(f"  {name:<28}" + "  ".join(f"{r.name}: {r.coverage[name]:<40}" for r in results))
    for probe in results[0].soundness if results else []:
        print(f"  {probe:<34}" + "  ".join(f"{r.name}: {r.soundness[probe]:<10}" for r in results))
