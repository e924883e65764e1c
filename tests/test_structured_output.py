"""Structured outputs (JSON schema / JSON object) on tiny random checkpoints: every output parses and validates,
next to unconstrained requests, with n > 1, chunked prefill, preemption, streaming and speculative decoding; bad
schemas are refused before anything runs. The real-model check is in test_structured_output_smollm2.py."""
import asyncio
import json

import jsonschema
import pytest

from test_engine_equality import make_prompts
from tiers import Engine, InvalidRequestError, SamplingParams, StructuredOutputParams

pytestmark = pytest.mark.usefixtures("one_thread")

# Every part bounded, so a random model's sampled output always completes well within MAX_TOKENS.
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 8},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1,
                 "maxItems": 3},
        "wind": {"type": "boolean"},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
CONSTRAINED = StructuredOutputParams(json_schema=SCHEMA)
MAX_TOKENS = 80


@pytest.fixture(scope="module")
def engine(llama_path):
    return Engine.from_pretrained(llama_path, max_model_len=256)


@pytest.fixture(scope="module")
def prompts(engine):
    return make_prompts(engine.model_config.vocab_size)


def constrained(temperature=0.0, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=MAX_TOKENS, temperature=temperature, structured_output=CONSTRAINED, **kw)


def assert_valid(out, schema=SCHEMA):
    assert out.finish_reason == "stop", (out.finish_reason, out.text)
    jsonschema.validate(json.loads(out.text), schema)


def test_fifty_seeded_sampled_generations_all_validate(engine, prompts):
    params = [constrained(temperature=1.0, seed=seed) for seed in range(50)]
    outs = engine.generate([prompts[i % len(prompts)] for i in range(50)], params)
    for out in outs:
        assert_valid(out)
    assert len({o.text for o in outs}) > 40  # sampled, not one answer repeated
    assert engine.stats().num_used_blocks == 0


def test_json_object_gives_objects(engine, prompts):
    params = SamplingParams(max_tokens=200, temperature=1.0, structured_output=StructuredOutputParams(json_object=True))
    outs = [engine.generate([prompts[0]], SamplingParams(**{**params.__dict__, "seed": s}))[0] for s in range(6)]
    finished = [o for o in outs if o.finish_reason == "stop"]
    assert finished, "no json_object generation finished within 200 tokens"
    for out in finished:
        assert isinstance(json.loads(out.text), dict)
    for out in outs:  # cut by max_tokens: an unfinished object, never anything else
        assert out.text.startswith("{")


def test_constrained_next_to_unconstrained(engine, prompts):
    free = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    solo = engine.generate([prompts[1]], free)[0].token_ids
    outs = engine.generate(prompts[:4], [constrained(), free, constrained(temperature=1.0, seed=3), free])
    assert outs[1].token_ids == solo
    assert_valid(outs[0])
    assert_valid(outs[2])
    # The unconstrained request really is free: its greedy text is not JSON.
    with pytest.raises(ValueError):
        json.loads(outs[1].text)


def test_each_sequence_has_its_own_grammar(engine, prompts):
    """n > 1 as the API sends it: the same params for several sequences, each with its own matcher."""
    outs = engine.generate([prompts[2]] * 4, [constrained(temperature=1.0, seed=s) for s in range(4)])
    for out in outs:
        assert_valid(out)
    twins = engine.generate([prompts[2]] * 2, constrained())
    assert twins[0].token_ids == twins[1].token_ids
    assert_valid(twins[0])


def test_chunked_prefill_and_preemption_keep_grammars_consistent(llama_path, engine, prompts):
    reference = engine.generate(prompts, constrained())
    for out in reference:
        assert_valid(out)
    chunked = Engine.from_pretrained(llama_path, max_model_len=256, max_num_batched_tokens=7)
    assert [o.token_ids for o in chunked.generate(prompts, constrained())] == [o.token_ids for o in reference]
    # 13 blocks of 16 tokens hold the longest sequence (101 + 80 tokens), not the batch.
    small = Engine.from_pretrained(llama_path, kv_cache_bytes=13 * engine.runner.kv_bytes_per_block,
                                   enable_prefix_caching=False)
    assert [o.token_ids for o in small.generate(prompts, constrained())] == [o.token_ids for o in reference]
    assert small.stats().num_preemptions > 0  # recomputed sequences kept their grammar state, never re-fed it


def test_speculative_decoding_gives_the_same_constrained_output(pair):
    target, draft = pair
    prompts = make_prompts(512)
    plain = Engine.from_pretrained(target).generate(prompts, constrained())
    free = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    for kwargs in ({"draft": draft}, {"speculative": "ngram"}):
        spec = Engine.from_pretrained(target, speculative_adaptive=False, **kwargs)
        outs = spec.generate(prompts + prompts[:2], [constrained()] * len(prompts) + [free, free])
        assert [o.token_ids for o in outs[:len(prompts)]] == [o.token_ids for o in plain]
        for out in outs[:len(prompts)]:
            assert_valid(out)
        # The unconstrained requests in the same batch did speculate.
        assert spec.stats().speculative.num_draft_tokens > 0


def test_streaming_yields_the_json_piece_by_piece(engine, prompts):
    async def collect():
        pieces, last = [], None
        async for out in engine.stream(prompts[3], constrained(temperature=1.0, seed=11)):
            pieces.append(out.delta_text)
            last = out
        return "".join(pieces), last

    text, last = asyncio.run(collect())
    assert text == last.text
    assert_valid(last)


def test_max_tokens_can_cut_the_json(engine, prompts):
    out = engine.generate([prompts[0]], SamplingParams(max_tokens=3, temperature=0.0, structured_output=CONSTRAINED))[0]
    assert out.finish_reason == "length" and out.text.startswith("{")


def test_grammar_completes_before_min_tokens(engine, prompts):
    """min_tokens cannot push a finished JSON value on: the grammar's EOS stays allowed."""
    so = StructuredOutputParams(json_schema={"enum": ["yes", "no"]})
    out = engine.generate([prompts[0]], SamplingParams(max_tokens=20, temperature=0.0, min_tokens=10,
                                                       structured_output=so))[0]
    assert out.finish_reason == "stop" and json.loads(out.text) in ("yes", "no")


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one"),
    ({"json_schema": SCHEMA, "json_object": True}, "exactly one"),
    ({"json_schema": "not a dict"}, "must be a JSON object"),
    ({"json_object": "yes"}, "json_object must be a boolean"),
    ({"json_schema": {"enum": [float("nan")]}}, "not serialisable"),
])
def test_bad_structured_output_params(kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        StructuredOutputParams(**kwargs)


@pytest.mark.parametrize("schema, message", [
    ({"type": "foo"}, "foo"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "missing"),
    ({"type": "string", "pattern": "(unclosed"}, "schema"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "schema"),
    ({"type": "object", "x-guidance": {"whitespace_flexible": True}}, "x-guidance"),
])
def test_bad_schemas_are_refused_before_anything_runs(engine, prompts, schema, message):
    params = SamplingParams(max_tokens=4, structured_output=StructuredOutputParams(json_schema=schema))
    with pytest.raises(InvalidRequestError, match=message):
        engine.check_structured_output(params.structured_output)
    with pytest.raises(InvalidRequestError, match=message):
        engine.add_request(prompts[0], params)
    assert not engine.has_unfinished_requests()
    assert engine.generate([prompts[0]], SamplingParams(max_tokens=2))[0].finish_reason == "length"


def test_grammars_are_cached_by_canonical_schema(engine):
    grammars = engine.processor.grammars
    before = grammars.cache_len()
    schema = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}}
    reordered = {"properties": {"y": {"type": "string"}, "x": {"type": "integer"}}, "type": "object"}
    first = grammars.compile(StructuredOutputParams(json_schema=schema))
    assert grammars.compile(StructuredOutputParams(json_schema=reordered)) is first
    assert grammars.cache_len() == before + 1


def test_a_model_without_tokenizer_refuses_structured_output(tmp_path, llama_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(llama_path, bare)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink(missing_ok=True)
    engine = Engine.from_pretrained(bare, max_model_len=64)
    with pytest.raises(InvalidRequestError, match="tokenizer"):
        engine.add_request([5, 6, 7], constrained())


def test_min_tokens_never_leaves_a_constrained_row_without_tokens(engine):
    """Were every token the grammar allows a min_tokens stop token, the grammar's mask alone applies."""
    import torch

    from tiers.engine.logits_processor import process_logits
    from tiers.engine.sequence import Sequence

    so = StructuredOutputParams(json_schema={"enum": ["yes", "no"]})
    grammars = engine.processor.grammars
    logits = torch.zeros(1, engine.model_config.vocab_size)
    free = Sequence("a", [1], SamplingParams(structured_output=so), grammar=grammars.new_matcher(so))
    allowed = torch.isfinite(process_logits(logits, [free])[0]).nonzero().flatten().tolist()
    assert 0 < len(allowed) < logits.shape[1]
    seq = Sequence("b", [1], SamplingParams(structured_output=so, min_tokens=5), grammar=grammars.new_matcher(so),
                   min_tokens_stop_ids=frozenset(allowed))
    assert torch.isfinite(process_logits(logits, [seq])[0]).nonzero().flatten().tolist() == allowed
