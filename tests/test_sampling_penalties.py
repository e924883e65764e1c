"""logit_bias, presence/frequency/repetition penalties and min_tokens: validation, the processed logits against a
hand-written per-token reference, greedy decoding against transformers' raw logits processed by hand, batch
independence, speculative decoding, and what the remote tier sends."""
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from test_engine_equality import make_prompts
from tiers import Engine, InvalidRequestError, SamplingParams
from tiers.engine.logits_processor import process_logits
from tiers.engine.sampler import processed_probs
from tiers.engine.sequence import Sequence
from tiers.serving.remote import RemoteTier

pytestmark = pytest.mark.usefixtures("one_thread")

PENALTIES = dict(presence_penalty=1.5, frequency_penalty=0.7, repetition_penalty=1.4)


@pytest.fixture(scope="module")
def engine(llama_path):
    return Engine.from_pretrained(llama_path, max_model_len=256)


@pytest.mark.parametrize("kwargs, message", [
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"frequency_penalty": float("nan")}, "frequency_penalty"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"repetition_penalty": float("inf")}, "repetition_penalty"),
    ({"repetition_penalty": 1e-300}, r"repetition_penalty must be a number in \[0.01, 2.0\]"),
    ({"repetition_penalty": 2.01}, "repetition_penalty"),
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": True}, "temperature"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"min_tokens": 20, "max_tokens": 10}, "min_tokens"),
    ({"logit_bias": {5: 101}}, "logit_bias"),
    ({"logit_bias": {-1: 1}}, "logit_bias"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": [1, 2]}, "logit_bias"),
    ({"structured_output": {"json_object": True}}, "structured_output"),
])
def test_bad_params_raise_clear_errors(kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        SamplingParams(**kwargs)


def test_logit_bias_keys_may_be_decimal_strings():
    assert SamplingParams(logit_bias={"42": -5, 7: 2.5}).logit_bias == {42: -5.0, 7: 2.5}


@pytest.mark.parametrize("kwargs", [{"logit_bias": {512: 1.0}}, {"stop_token_ids": [100_000]}])
def test_token_ids_outside_the_vocabulary_are_refused(engine, kwargs):
    with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
        engine.add_request([5, 6, 7], SamplingParams(**kwargs))
    assert not engine.has_unfinished_requests()


def reference_logits(raw: list[float], prompt: list[int], output: list[int], params: SamplingParams,
                     stop_ids: set[int] = frozenset()) -> list[float]:
    """The definitions, one token at a time."""
    out = list(raw)
    for j in range(len(out)):
        if j in prompt or j in output:
            p = params.repetition_penalty
            out[j] = out[j] / p if out[j] > 0 else out[j] * p
        c = output.count(j)
        out[j] -= c * params.frequency_penalty + (1.0 if c > 0 else 0.0) * params.presence_penalty
        out[j] += (params.logit_bias or {}).get(j, 0.0)
        if len(output) < params.min_tokens and j in stop_ids:
            out[j] = -math.inf
    return out


def make_seq(prompt, output, params, stop_ids=frozenset()):
    seq = Sequence("r", prompt, params, min_tokens_stop_ids=frozenset(stop_ids) if params.min_tokens else frozenset())
    seq.token_ids.extend(output)
    return seq


def test_processed_logits_match_the_definitions():
    vocab = 40
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, vocab, generator=g) * 3
    cases = [
        ([1, 2, 3], [3, 3, 9, 12], SamplingParams(**PENALTIES)),
        ([5, 5], [], SamplingParams(repetition_penalty=0.6)),
        ([7], [8, 8, 8], SamplingParams(frequency_penalty=-1.0, presence_penalty=0.3,
                                        logit_bias={8: -2.0, 30: 4.5, 1: -100})),
        ([1], [2], SamplingParams()),  # untouched row in the same batch
        ([4], [6], SamplingParams(min_tokens=3, stop_token_ids=[11], logit_bias={0: 9.0})),
    ]
    seqs = [make_seq(p, o, sp, {0, 11}) for p, o, sp in cases]
    got = process_logits(logits, seqs)
    for i, (prompt, output, params) in enumerate(cases):
        expected = torch.tensor(reference_logits(logits[i].tolist(), prompt, output, params,
                                                 {0, 11} if params.min_tokens else set()))
        torch.testing.assert_close(got[i], expected, rtol=1e-5, atol=1e-5)
    assert logits is not got and torch.equal(got[3], logits[3])
    # Temperature applies after the processing: the sampled distribution is softmax(processed / T).
    params = [sp for _, _, sp in cases[:3]]
    probs = processed_probs(got[:3], [SamplingParams(temperature=0.7, **{k: getattr(sp, k) for k in PENALTIES})
                                      for sp in params])
    torch.testing.assert_close(probs, torch.softmax(got[:3] / 0.7, dim=-1))


def test_rows_without_processing_cost_nothing():
    logits = torch.randn(3, 16)
    seqs = [make_seq([1], [2], SamplingParams()) for _ in range(3)]
    assert process_logits(logits, seqs) is logits


def test_greedy_with_penalties_matches_transformers_logits_processed_by_hand(llama_path, engine):
    model = AutoModelForCausalLM.from_pretrained(llama_path, dtype=torch.float32).eval()
    prompt = make_prompts(engine.model_config.vocab_size)[1]
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True, logit_bias={100: 3.0, 200: -50},
                            **PENALTIES)
    got = engine.generate([prompt], params)[0].token_ids
    plain = engine.generate([prompt], SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True))[0].token_ids
    expected: list[int] = []
    with torch.no_grad():
        for _ in range(16):
            raw = model(torch.tensor([prompt + expected])).logits[0, -1].tolist()
            processed = reference_logits(raw, prompt, expected, params)
            expected.append(max(range(len(processed)), key=processed.__getitem__))
    assert got == expected
    assert got != plain  # the penalties did change the output


def test_min_tokens_masks_eos_and_stop_tokens(engine):
    eos = engine.tokenizer.eos_token_id
    prompt = [11, 42, 97]
    pushed = SamplingParams(max_tokens=12, temperature=0.0, logit_bias={eos: 100.0})
    assert engine.generate([prompt], pushed)[0].token_ids == [eos]
    out = engine.generate([prompt], SamplingParams(max_tokens=12, temperature=0.0, logit_bias={eos: 100.0},
                                                   min_tokens=5))[0]
    assert len(out.token_ids) == 6 and eos not in out.token_ids[:5] and out.token_ids[5] == eos
    assert out.finish_reason == "stop"
    stop = 300
    out = engine.generate([prompt], SamplingParams(max_tokens=12, temperature=1.0, seed=1, logit_bias={stop: 100.0},
                                                   stop_token_ids=[stop], min_tokens=4))[0]
    assert out.token_ids[4] == stop and stop not in out.token_ids[:4] and out.stop_reason == stop


def test_logprobs_stay_the_models_raw_distribution(engine):
    prompt = [11, 42, 97]
    plain = engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0, logprobs=1))[0]
    bias = {plain.token_ids[0]: -100.0}
    biased = engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0, logprobs=1, logit_bias=bias))[0]
    assert biased.token_ids != plain.token_ids
    # The raw model's top token is still reported as the top alternative, with its raw logprob.
    assert biased.logprobs[0].top[0] == pytest.approx(plain.logprobs[0].top[0])


def test_processed_rows_do_not_disturb_their_batch(engine):
    prompts = make_prompts(engine.model_config.vocab_size)[:4]
    free = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    solo = [engine.generate([p], free)[0].token_ids for p in prompts[1::2]]
    mixed = engine.generate(prompts, [SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, **PENALTIES),
                                      free,
                                      SamplingParams(max_tokens=12, temperature=0.8, seed=2, logit_bias={5: 5.0}),
                                      free])
    assert [mixed[1].token_ids, mixed[3].token_ids] == solo


def test_speculative_decoding_gives_the_same_penalised_output(pair):
    target, draft = pair
    prompts = make_prompts(512)
    penalised = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logit_bias={50: 2.0}, min_tokens=3,
                               **PENALTIES)
    # min_tokens alone: sits out only while pending, then speculates (the draft catches up on the tokens it missed)
    late = SamplingParams(max_tokens=24, temperature=0.0, min_tokens=6)
    free = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    params = [penalised] * len(prompts) + [late, late, free]
    batch = prompts + prompts[:3]
    plain = [o.token_ids for o in Engine.from_pretrained(target).generate(batch, params)]
    spec = Engine.from_pretrained(target, draft=draft, speculative_adaptive=False)
    assert [o.token_ids for o in spec.generate(batch, params)] == plain
    assert spec.stats().speculative.num_draft_tokens > 0  # the others did speculate


def test_remote_tier_sends_the_sampling_fields():
    tier = RemoteTier(name="r", base_url="http://localhost:1", model="m", max_model_len=100)
    body = tier._body([{"role": "user", "content": "hi"}],
                      SamplingParams(logit_bias={42: -5}, presence_penalty=0.5, frequency_penalty=-0.25,
                                     repetition_penalty=1.1, min_tokens=2))
    assert body["logit_bias"] == {"42": -5.0}
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, -0.25)
    assert (body["repetition_penalty"], body["min_tokens"]) == (1.1, 2)
    plain = tier._body([{"role": "user", "content": "hi"}], SamplingParams())
    assert not {"logit_bias", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens"} & set(plain)


@pytest.mark.parametrize("temperature", [1e-300, 5e-324, 1e-40, 1e-20, 1e-6])
def test_a_tiny_temperature_is_exact_and_gives_the_argmax(temperature):
    """(logits - max) / T: finite for every T > 0 (logits / 1e-20 overflowed to inf, and 1e-300 is 0 in float32:
    softmax gave NaN and the answer came back empty). The distribution is one-hot on the argmax, as greedy."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 64, generator=g) * 30
    logits[:, 7] = float("-inf")  # a masked token (grammar, min_tokens) stays impossible
    probs = processed_probs(logits, [SamplingParams(temperature=temperature)] * 4)
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs, torch.nn.functional.one_hot(logits.argmax(-1), 64).float())


def test_a_temperature_up_to_two_is_the_softmax_of_logits_over_t():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(2)) * 5
    for temperature in (0.05, 0.7, 1.0, 2.0):
        probs = processed_probs(logits, [SamplingParams(temperature=temperature)] * 3)
        torch.testing.assert_close(probs, torch.softmax(logits.double() / temperature, dim=-1).float())


@pytest.mark.parametrize("temperature", [1e-300, 1e-20])
def test_the_engine_at_a_tiny_temperature_answers_as_greedy(engine, temperature):
    prompts = make_prompts(engine.model_config.vocab_size)[:3]
    greedy = engine.generate(prompts, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    tiny = engine.generate(prompts, [SamplingParams(max_tokens=12, temperature=temperature, seed=i, ignore_eos=True)
                                     for i in range(3)])
    assert all(len(o.token_ids) == 12 for o in tiny)
    assert [o.token_ids for o in tiny] == [o.token_ids for o in greedy]


@pytest.mark.parametrize("repetition_penalty", [0.01, 2.0])
def test_the_repetition_penalty_at_its_bounds_matches_the_definition(llama_path, engine, repetition_penalty):
    """The documented range's ends through the engine: a full answer, token for token the greedy choice over
    transformers' raw logits penalised by hand (in float64)."""
    model = AutoModelForCausalLM.from_pretrained(llama_path, dtype=torch.float32).eval()
    prompt = make_prompts(engine.model_config.vocab_size)[2]
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True, repetition_penalty=repetition_penalty)
    got = engine.generate([prompt], params)[0].token_ids
    expected: list[int] = []
    with torch.no_grad():
        for _ in range(10):
            raw = model(torch.tensor([prompt + expected])).logits[0, -1].tolist()
            processed = reference_logits(raw, prompt, expected, params)
            assert all(math.isfinite(x) for x in processed)
            expected.append(max(range(len(processed)), key=processed.__getitem__))
    assert len(got) == 10 and got == expected
