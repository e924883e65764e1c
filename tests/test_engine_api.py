"""The Engine's public behaviour: validation, sampling options, stops, abort, streaming, failure isolation."""
import asyncio
import time

import pytest
import torch
from transformers import AutoModelForCausalLM

from tiers import Engine, InvalidRequestError, SamplingParams


@pytest.fixture(scope="module")
def engine(llama_path):
    return Engine.from_pretrained(llama_path, max_model_len=256)


@pytest.fixture(scope="module")
def hf_model(llama_path):
    return AutoModelForCausalLM.from_pretrained(llama_path, dtype=torch.float32).eval()


PROMPT = [11, 42, 97, 123, 7, 300, 55, 18, 402, 33]


def greedy(engine, prompt=PROMPT, **kw):
    params = SamplingParams(**{"max_tokens": 16, "temperature": 0.0, "ignore_eos": True, **kw})
    return engine.generate([prompt], params)[0]


def assert_no_leak(engine):
    stats = engine.stats()
    assert stats.num_used_blocks == 0 and stats.num_running == 0 and stats.num_waiting == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -3}, "top_k"),
    ({"stop": [""]}, "stop"),
    ({"logprobs": 50}, "logprobs"),
])
def test_bad_sampling_params_raise_clear_errors(kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("prompt, message", [
    ("", "empty"),
    ([], "empty"),
    ([5, 10_000_000], "outside the vocabulary"),
    ([5, -1], "outside the vocabulary"),
    ([5, "x"], "list of integers"),
    (list(range(10, 10 + 257)), "maximum context length of 256"),
    (3.5, "string or a list of token ids"),
])
def test_bad_prompts_raise_and_leave_the_engine_working(engine, prompt, message):
    with pytest.raises(InvalidRequestError, match=message):
        engine.generate([PROMPT, prompt], SamplingParams(max_tokens=4))
    assert_no_leak(engine)
    assert greedy(engine).finish_reason == "length"


def test_text_prompt_and_chat_template(engine):
    ids = engine.apply_chat_template([{"role": "user", "content": "Hello there"}])
    assert ids == engine.tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}],
                                                       add_generation_prompt=True, tokenize=True,
                                                       return_dict=False)
    by_text = engine.generate("Hello there", SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0]
    by_ids = engine.generate([engine.tokenizer.encode("Hello there")],
                             SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0]
    assert by_text.token_ids == by_ids.token_ids
    assert by_text.text == engine.tokenizer.decode(by_text.token_ids, skip_special_tokens=True)


def test_seed_is_reproducible_whatever_the_batch(engine):
    params = SamplingParams(max_tokens=20, temperature=1.0, seed=1234, ignore_eos=True)
    alone = engine.generate([PROMPT], params)[0].token_ids
    other = SamplingParams(max_tokens=30, temperature=0.8, ignore_eos=True)
    batched = engine.generate([[1, 2, 3], PROMPT, PROMPT[:4]], [other, params, other])[1].token_ids
    assert alone == batched
    different = engine.generate([PROMPT], SamplingParams(max_tokens=20, temperature=1.0, seed=99,
                                                         ignore_eos=True))[0].token_ids
    assert different != alone


def test_top_k_1_and_tiny_top_p_are_greedy(engine):
    expected = greedy(engine).token_ids
    assert greedy(engine, temperature=1.0, top_k=1, seed=5).token_ids == expected
    assert greedy(engine, temperature=1.5, top_p=1e-6, seed=5).token_ids == expected


def test_top_k_restricts_samples_to_the_k_best(engine, hf_model):
    params = SamplingParams(max_tokens=1, temperature=5.0, top_k=3, ignore_eos=True)
    firsts = {o.token_ids[0] for o in engine.generate([PROMPT] * 40, params)}
    logits = hf_model(torch.tensor([PROMPT])).logits[0, -1]
    top3 = set(logits.topk(3).indices.tolist())
    assert firsts <= top3 and len(firsts) > 1


def test_logprobs_match_transformers(engine, hf_model):
    out = greedy(engine, max_tokens=4, logprobs=3)
    assert len(out.logprobs) == 4
    ids = torch.tensor([PROMPT + out.token_ids])
    ref = torch.log_softmax(hf_model(ids).logits[0].float(), dim=-1)
    for i, lp in enumerate(out.logprobs):
        row = ref[len(PROMPT) - 1 + i]
        assert lp.token_id == out.token_ids[i]
        assert lp.logprob == pytest.approx(row[lp.token_id].item(), abs=1e-4)
        assert [t for t, _ in lp.top] == row.topk(3).indices.tolist()
        assert lp.top[0][0] == lp.token_id  # greedy picks the best


def test_stop_token_ids_and_eos(engine):
    full = greedy(engine).token_ids
    stop_id = full[5]
    first = full.index(stop_id)
    out = greedy(engine, stop_token_ids=[stop_id])
    assert out.finish_reason == "stop" and out.stop_reason == stop_id
    assert out.token_ids == full[:first + 1]
    # The model's eos ends a request unless ignore_eos is set.
    saved = set(engine.output_processor.eos_token_ids)
    engine.output_processor.eos_token_ids = {stop_id}
    try:
        assert greedy(engine, ignore_eos=False).token_ids == full[:first + 1]
        assert greedy(engine, ignore_eos=False).finish_reason == "stop"
        assert greedy(engine, ignore_eos=True).token_ids == full
    finally:
        engine.output_processor.eos_token_ids = saved


def test_stop_strings_cut_the_text(engine):
    full = greedy(engine, max_tokens=24)
    text = full.text
    assert len(text) > 6
    stop = text[len(text) // 2:len(text) // 2 + 3]
    out = greedy(engine, max_tokens=24, stop=[stop, "never-appears"])
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == text[:text.index(stop)]
    assert stop not in out.text


def test_max_model_len_ends_with_length(llama_path):
    engine = Engine.from_pretrained(llama_path, max_model_len=20)
    out = engine.generate([PROMPT], SamplingParams(max_tokens=100, temperature=0, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(PROMPT) + len(out.token_ids) == 20


def test_abort_frees_blocks(engine):
    rid = engine.add_request(PROMPT, SamplingParams(max_tokens=200, ignore_eos=True))
    seen = []
    for _ in range(3):
        seen += engine.step()
    assert engine.stats().num_used_blocks > 0
    engine.abort(rid)
    outs = engine.step()
    assert [(o.request_id, o.finish_reason, o.finished) for o in outs] == [(rid, "abort", True)]
    assert_no_leak(engine)
    engine.abort(rid)  # aborting a finished request is a no-op
    engine.abort("no-such-request")
    assert engine.step() == []


def test_failed_step_fails_its_requests_only(engine, monkeypatch):
    real_execute = engine.runner.execute
    calls = {"n": 0}

    def flaky(scheduled):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated device fault")
        return real_execute(scheduled)

    monkeypatch.setattr(engine.runner, "execute", flaky)
    with pytest.raises(RuntimeError, match="simulated device fault"):
        greedy(engine)
    assert_no_leak(engine)
    monkeypatch.setattr(engine.runner, "execute", real_execute)
    assert greedy(engine).finish_reason == "length"


def test_priority_orders_admission(llama_path):
    engine = Engine.from_pretrained(llama_path, max_num_seqs=1)
    finished = []
    params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    engine.add_request(PROMPT, params, request_id="replay", priority=10)
    engine.add_request(PROMPT, params, request_id="user", priority=0)
    while engine.has_unfinished_requests():
        finished += [o.request_id for o in engine.step() if o.finished]
    assert finished == ["user", "replay"]


def test_queue_time_runs_from_arrival_to_the_first_schedule(llama_path):
    engine = Engine.from_pretrained(llama_path, max_num_seqs=1)
    params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    engine.add_request(PROMPT, params, request_id="first")
    added = time.monotonic()
    engine.add_request(PROMPT[:5], params, request_id="second")  # no seat until "first" is done
    queue_times: dict[str, list[float | None]] = {"first": [], "second": []}
    first_done = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            queue_times[out.request_id].append(out.queue_time_s)
            if out.request_id == "first" and out.finished:
                first_done = time.monotonic()
    first, second = queue_times["first"], queue_times["second"]
    assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] is not None  # fixed once scheduled
    assert first[0] >= 0 and second[0] >= first_done - added  # "second" waited through all of "first"


def test_duplicate_request_id_is_refused(engine):
    engine.add_request(PROMPT, SamplingParams(max_tokens=2), request_id="dup")
    with pytest.raises(InvalidRequestError, match="already in use"):
        engine.add_request(PROMPT, SamplingParams(max_tokens=2), request_id="dup")
    while engine.has_unfinished_requests():
        engine.step()
    assert_no_leak(engine)


def test_concurrent_streams_share_steps_and_match_generate(llama_path):
    engine = Engine.from_pretrained(llama_path, max_model_len=256)
    prompts = [PROMPT, PROMPT[:3], [7] * 20, PROMPT[::-1]]
    lengths = [12, 20, 7, 16]
    expected = [greedy(engine, p, max_tokens=n) for p, n in zip(prompts, lengths)]
    steps_before = engine.stats().num_steps

    async def consume(prompt, n):
        deltas, tokens, last = [], [], None
        async for out in engine.stream(prompt, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)):
            deltas.append(out.delta_text)
            tokens += out.new_token_ids
            last = out
        return "".join(deltas), tokens, last

    async def main():
        return await asyncio.gather(*(consume(p, n) for p, n in zip(prompts, lengths)))

    results = asyncio.run(main())
    for (text, tokens, last), exp in zip(results, expected):
        assert last.finished and last.finish_reason == "length"
        assert tokens == last.token_ids == exp.token_ids
        assert text == last.text == exp.text
    assert engine.stats().num_steps - steps_before < sum(lengths)  # requests shared steps
    assert_no_leak(engine)
    engine.close()


def test_stream_with_stop_string_never_leaks_the_stop(llama_path):
    engine = Engine.from_pretrained(llama_path, max_model_len=256)
    text = greedy(engine, max_tokens=24).text
    stop = text[len(text) // 2:len(text) // 2 + 4]

    async def main():
        deltas = []
        async for out in engine.stream(PROMPT, SamplingParams(max_tokens=24, temperature=0, ignore_eos=True,
                                                              stop=stop)):
            deltas.append(out.delta_text)
        return deltas, out

    deltas, last = asyncio.run(main())
    assert "".join(deltas) == text[:text.index(stop)] == last.text
    assert last.finish_reason == "stop"
    engine.close()


def test_closing_a_stream_aborts_the_request(llama_path):
    engine = Engine.from_pretrained(llama_path, max_model_len=256)

    async def main():
        agen = engine.stream(PROMPT, SamplingParams(max_tokens=200, ignore_eos=True))
        got = 0
        async for _ in agen:
            got += 1
            if got == 3:
                break
        await agen.aclose()
        for _ in range(100):  # the background loop frees the blocks on its next step
            if engine.stats().num_used_blocks == 0 and not engine.has_unfinished_requests():
                return got
            await asyncio.sleep(0.02)
        return got

    assert asyncio.run(main()) == 3
    assert_no_leak(engine)
    engine.close()


def test_a_broken_scheduler_fails_streams_instead_of_hanging(llama_path, monkeypatch):
    engine = Engine.from_pretrained(llama_path, max_model_len=256)

    def broken():
        raise RuntimeError("simulated scheduler bug")

    monkeypatch.setattr(engine.scheduler, "schedule", broken)

    async def main():
        async for _ in engine.stream(PROMPT, SamplingParams(max_tokens=5)):
            pass

    with pytest.raises(RuntimeError, match="simulated scheduler bug"):
        asyncio.run(asyncio.wait_for(main(), timeout=30))
    engine.close()


def run_to_completion(engine) -> dict[str, object]:
    """Steps until idle; each request's final output by id."""
    finished = {}
    while engine.has_unfinished_requests():
        finished.update((o.request_id, o) for o in engine.step() if o.finished)
    return finished


def test_a_sequence_that_breaks_the_batched_step_fails_alone(engine, monkeypatch):
    from tiers.engine.errors import REQUEST_FAILED

    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    alone = {name: greedy(engine, p, max_tokens=12).token_ids for name, p in (("a", PROMPT), ("b", PROMPT[:6]))}
    real_execute = engine.runner.execute

    def poisoned(scheduled):
        if any(s.seq.request_id == "poison" for s in scheduled) and any(s.seq.num_output_tokens >= 3
                                                                         for s in scheduled):
            raise RuntimeError("simulated fault in one request's step")
        return real_execute(scheduled)

    monkeypatch.setattr(engine.runner, "execute", poisoned)
    engine.add_request(PROMPT, params, request_id="a")
    engine.add_request(PROMPT[3:], params, request_id="poison")
    engine.add_request(PROMPT[:6], params, request_id="b")
    finished = run_to_completion(engine)
    assert finished["poison"].finish_reason == "error" and finished["poison"].error_kind == REQUEST_FAILED
    assert "simulated fault" in finished["poison"].error
    assert finished["a"].finish_reason == finished["b"].finish_reason == "length"
    assert finished["a"].token_ids == alone["a"] and finished["b"].token_ids == alone["b"]
    assert_no_leak(engine)


def test_a_grammar_that_gives_up_mid_generation_fails_its_request_only(engine, monkeypatch):
    """The recursive schema of the blast-radius report, let past the up-front check: llguidance gives up after its
    first tokens. Its request ends as an invalid request; the one decoding beside it is untouched."""
    from tiers.engine import structured_output
    from tiers.engine.errors import REQUEST_INVALID
    from tiers import StructuredOutputParams

    monkeypatch.setattr(structured_output, "_check_recursion", lambda schema: None)
    endless = StructuredOutputParams(json_schema={"type": "object", "properties": {"a": {"$ref": "#"}},
                                                  "required": ["a"]})
    alone = greedy(engine, max_tokens=20).token_ids
    engine.add_request(PROMPT, SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True), request_id="ok")
    engine.add_request(PROMPT[2:], SamplingParams(max_tokens=40, temperature=0.0, structured_output=endless),
                       request_id="endless")
    finished = run_to_completion(engine)
    assert finished["endless"].finish_reason == "error" and finished["endless"].error_kind == REQUEST_INVALID
    assert "structured output could not go on" in finished["endless"].error
    assert finished["ok"].finish_reason == "length" and finished["ok"].token_ids == alone
    assert_no_leak(engine)
    with pytest.raises(InvalidRequestError, match="structured output could not go on"):
        engine.generate([PROMPT], SamplingParams(max_tokens=40, temperature=0.0, structured_output=endless))


def test_a_broken_engine_loop_is_the_tier_s_failure(llama_path, monkeypatch):
    """The scheduler's own failure is not one request's: the local tier reports itself unavailable."""
    from tiers.serving.pool import LocalTier, TierUnavailableError

    engine = Engine.from_pretrained(llama_path, max_model_len=256)
    tier = LocalTier("small", engine, "m")
    monkeypatch.setattr(engine.scheduler, "schedule", lambda: (_ for _ in ()).throw(RuntimeError("bug")))

    async def main():
        async for _ in tier.stream_chat([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=3), "r1"):
            pass

    with pytest.raises(TierUnavailableError, match="engine failed"):
        asyncio.run(asyncio.wait_for(main(), timeout=30))
    engine.close()
