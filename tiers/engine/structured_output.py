"""Guided decoding with llguidance: JSON schemas compiled to grammars (an LRU cache per engine), one grammar
matcher per sequence, and the vocabulary bitmask of the tokens each constrained row may take next.

llguidance was chosen over xgrammar by measurement (benchmarks/structured_output.py, docs/engine.md): both compile
all 16 test schemas, but xgrammar 0.2 lets a JSON string take raw control characters (with minLength/maxLength)
and UTF-16 surrogates, i.e. invalid JSON or invalid UTF-8 that sampled outputs did hit, where llguidance refuses
them; xgrammar's masks are faster (~4 us against ~90-120 us per token on SmolLM2's 49k vocabulary), which is
small beside a decode step. JSON is generated compact (no free whitespace), so a model cannot wander into endless
whitespace. llguidance stops a grammar as soon as nothing but EOS can follow (a closed object), so such outputs end
without an EOS token. Before the library sees a schema, it is bounded (schema_limits: past its bounds the library
overflowed its native stack or took seconds) and checked for recursion without end (schema_cycles); every compile
runs on a thread with a stack of known size.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

import torch

from tiers.engine.errors import GrammarError
from tiers.engine.sampling_params import InvalidRequestError, StructuredOutputParams
from tiers.engine.schema_cycles import SchemaTooDeepError, empty_ref_cycle
from tiers.engine.schema_limits import check_depth, check_shape, compact_json, on_compile_stack, parser_limits
from tiers.engine.schema_refs import SchemaGraph, schema_graph

CACHE_SIZE = 256
COMPACT = {"x-guidance": {"whitespace_flexible": False}}
GRAMMAR_FAILED = "structured output could not go on"  # how a grammar that gave up mid-generation reads


class GrammarCompiler:
    """Compiles StructuredOutputParams for one tokenizer and vocabulary (the model's logits width); thread-safe.
    The tokenizer's preprocessing (seconds for a 49k vocabulary) runs in a background thread from construction."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: set[int], cache_size: int = CACHE_SIZE
                 ) -> None:
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self.stop_token_ids = sorted(stop_token_ids)
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._lltokenizer: Any = None
        self._setup_error: Exception | None = None
        self._ready = threading.Event()
        if tokenizer is not None:
            # not a daemon: the interpreter waits for it at exit, where a daemon thread still inside llguidance's
            # native code would crash the finalising process (seen with one CPU, the preprocessing not yet done)
            threading.Thread(target=self._setup, name="grammar-tokenizer", daemon=False).start()
        else:
            self._ready.set()

    def _setup(self) -> None:
        try:
            import llguidance.hf

            self._lltokenizer = llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size,
                                                             eos_token=self.stop_token_ids or None)
        except Exception as exc:  # surfaced to the first structured request
            self._setup_error = exc
        finally:
            self._ready.set()

    def _get_tokenizer(self) -> Any:
        self._ready.wait()
        if self.tokenizer is None:
            raise InvalidRequestError("structured output needs the model's tokenizer, and this model has none")
        if self._setup_error is not None:
            raise RuntimeError(f"the grammar library could not read this model's tokenizer: {self._setup_error}")
        return self._lltokenizer

    def compile(self, params: StructuredOutputParams) -> Any:
        """A fresh matcher of the grammar, to deep_copy per sequence; InvalidRequestError for a schema past
        schema_limits, without a finite instance, or that the library rejects."""
        if not isinstance(params, StructuredOutputParams):
            raise InvalidRequestError(f"structured_output must be StructuredOutputParams, got {type(params).__name__}")
        key = params.canonical_key()
        with self._lock:
            matcher = self._cache.get(key)
            if matcher is not None:
                self._cache.move_to_end(key)
                return matcher
        matcher = self._compile(params)  # outside the lock: other requests' cached lookups go on
        with self._lock:
            self._cache[key] = matcher
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return matcher

    def _compile(self, params: StructuredOutputParams) -> Any:
        """Checks the schema against schema_limits and schema_cycles, then compiles it on a thread of its own
        (schema_limits.on_compile_stack), whichever thread calls."""
        tokenizer = self._get_tokenizer()
        schema = {"type": "object"} if params.json_object else params.json_schema
        if "x-guidance" in schema:
            raise InvalidRequestError("structured_output.json_schema must not set 'x-guidance'")
        parsed = json.loads(compact_json(schema))  # what the library gets, no object shared between two places
        check_shape(parsed)
        graph = schema_graph(parsed)
        check_depth(graph)
        _check_recursion(graph)
        text = json.dumps({**parsed, **COMPACT}, separators=(",", ":"))
        return on_compile_stack(lambda: _matcher(tokenizer, text))

    def new_matcher(self, params: StructuredOutputParams) -> GrammarState:
        return GrammarState(self.compile(params).deep_copy())

    def cache_len(self) -> int:
        return len(self._cache)


class GrammarState:
    """One sequence's position in its grammar. The mask allows the stop tokens (the model's EOS) only where the
    grammar accepts the output so far. A grammar that cannot go on (the library hit one of its limits while
    computing a mask, or refused a token its mask allowed) fails its own request only: `error` says why."""

    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher
        self.error: str | None = None

    def accept(self, token: int) -> None:
        """Advances by `token`; GrammarError when the grammar has failed or cannot take it."""
        if self.error is None and not (self.matcher.consume_token(token) and not self.matcher.is_error()):
            self.error = f"the grammar refused token {token}: {self._library_error()}"
        if self.error is not None:
            raise GrammarError(f"{GRAMMAR_FAILED}: {self.error}")

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        """Writes the tokens allowed next into bitmask[row]; on failure, records it and allows everything (the
        row's token is discarded with its request)."""
        import llguidance.torch

        try:
            llguidance.torch.fill_next_token_bitmask(self.matcher, bitmask, row)
            failed = self.matcher.is_error()
        except Exception as exc:  # noqa: BLE001 - the library's own failure, this request's alone
            failed, self.error = True, _first_line(exc)
        if failed:
            self.error = self.error or self._library_error()
            bitmask[row] = -1

    def _library_error(self) -> str:
        return _first_line(self.matcher.get_error()) if self.matcher.is_error() else "no reason given"

    @property
    def is_terminated(self) -> bool:
        """Nothing can follow: a stop token was accepted, or the value is complete and only EOS could come."""
        return self.matcher.is_stopped()


def apply_grammar_masks(logits: torch.Tensor, rows: list[int], states: list[GrammarState]) -> None:
    """Sets logits[rows[j], t] = -inf for every token t the j-th grammar does not allow next (in place)."""
    import llguidance.torch

    bitmask = llguidance.torch.allocate_token_bitmask(len(rows), logits.shape[-1])
    for j, state in enumerate(states):
        state.fill_mask(bitmask, j)
    sub = logits[rows]
    llguidance.torch.apply_token_bitmask_inplace(sub, bitmask.to(sub.device))
    logits[rows] = sub


def _matcher(tokenizer: Any, text: str) -> Any:
    import llguidance

    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(text)
        matcher = llguidance.LLMatcher(tokenizer, grammar, limits=parser_limits())
    except (ValueError, TypeError, RuntimeError) as exc:
        raise InvalidRequestError(f"invalid JSON schema in structured_output: {_first_line(exc)}") from None
    if matcher.is_error():
        raise InvalidRequestError(f"unsupported or invalid JSON schema in structured_output: "
                                  f"{_first_line(matcher.get_error())}")
    return matcher


def _check_recursion(graph: SchemaGraph) -> None:
    """A schema whose `$ref` recursion never ends is the request's 400, before the grammar library gives up on it
    mid-generation."""
    try:
        cycle = empty_ref_cycle(graph.root, graph)
    except SchemaTooDeepError as exc:
        raise InvalidRequestError(f"invalid JSON schema in structured_output: {exc}") from None
    if cycle is not None:
        raise InvalidRequestError(
            f"the JSON schema has no finite instance: the $ref cycle {' -> '.join(cycle)} never ends (each step is "
            "required); make a step optional, allow an empty array, or add an anyOf branch without the $ref")


def _first_line(message: Any) -> str:
    text = str(message).strip()
    return text.splitlines()[0] if text else "unknown error"
