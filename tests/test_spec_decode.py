"""Speculative decoding: greedy identity with the target alone (and transformers), the exact output distribution
of the rejection sampler, rollback of rejected positions without leaking blocks, vocabulary checks, stats."""
import shutil

import pytest
import torch

from conftest import INIT_RANGE, TRITON_DEVICES
from test_engine_equality import hf_greedy, make_prompts
from tiers import Engine, SamplingParams
from tiers.checkpoints import create_random_checkpoint
from tiers.engine.sampler import processed_probs
from tiers.engine.sequence import Sequence
from tiers.engine.spec_decode.adaptive import (AcceptanceEstimate, ConfidenceCalibration, CostModel, SpecController,
                                               expected_tokens)
from tiers.engine.spec_decode.proposer import NgramProposer
from tiers.engine.rejection_sampler import verify_one
from tiers.native import native_library

MAX_TOKENS = 24


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def bad_draft(tmp_path_factory):
    """Unrelated random weights, same tokenizer: nearly every draft token is rejected."""
    return create_random_checkpoint(tmp_path_factory.mktemp("bad") / "draft", "llama", seed=7, num_layers=1,
                                    initializer_range=INIT_RANGE)


def greedy(engine: Engine, prompts, max_tokens: int = MAX_TOKENS, **kw) -> list[list[int]]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **kw)
    return [o.token_ids for o in engine.generate(prompts, params)]


def assert_no_leak(engine: Engine) -> None:
    stats = engine.stats()
    assert stats.num_used_blocks == 0 and stats.num_running == stats.num_waiting == 0
    assert all(b.ref_count == 0 for b in engine.block_manager.pool.blocks)


def kv_block_bytes(target, draft=None) -> int:
    """The KV bytes of one block for the target and, with a draft, the draft's pool too."""
    probe = Engine.from_pretrained(target, max_model_len=128, draft=draft)
    return probe.runner.kv_bytes_per_block + probe.runner.extra_kv_bytes_per_block


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_greedy_identity_batched(pair, method):
    target, draft = pair
    prompts = make_prompts(512)
    plain = greedy(Engine.from_pretrained(target), prompts)
    kwargs = {"draft": draft} if method == "draft" else {"speculative": "ngram"}
    engine = Engine.from_pretrained(target, speculative_adaptive=False, **kwargs)
    assert greedy(engine, prompts) == plain == hf_greedy(target, prompts, MAX_TOKENS)
    stats = engine.stats().speculative
    assert stats.num_verifications > 0 and stats.num_draft_tokens > stats.num_accepted_tokens
    if method == "draft":
        assert stats.num_accepted_tokens > 0 and stats.per_position_acceptance[-1] > 0  # full acceptances too
    assert_no_leak(engine)


def test_greedy_identity_with_chunked_prefill_and_preemption(pair):
    target, draft = pair
    prompts = make_prompts(512)
    expected = hf_greedy(target, prompts, MAX_TOKENS)
    chunked = Engine.from_pretrained(target, draft=draft, max_num_batched_tokens=7, speculative_adaptive=False)
    assert greedy(chunked, prompts) == expected
    assert_no_leak(chunked)
    block = kv_block_bytes(target, draft)
    for prefix_caching in (False, True):
        tight = Engine.from_pretrained(target, draft=draft, max_model_len=128, kv_cache_bytes=11 * block,
                                       enable_prefix_caching=prefix_caching, max_num_batched_tokens=13,
                                       speculative_adaptive=False)
        assert tight.stats().num_blocks == 11
        assert greedy(tight, prompts) == expected
        assert tight.stats().num_preemptions > 0
        assert_no_leak(tight)


def test_stops_inside_an_accepted_run_truncate_it(pair):
    """Several tokens per step: stop ids, eos and max_tokens are checked token by token."""
    target, _ = pair
    engine = Engine.from_pretrained(target, draft=target, speculative_adaptive=False)  # accepts everything
    prompts = make_prompts(512)[:3]
    plain = greedy(Engine.from_pretrained(target), prompts)
    stop_id = plain[0][6]
    outs = engine.generate(prompts, SamplingParams(max_tokens=11, temperature=0, ignore_eos=True,
                                                   stop_token_ids=[stop_id]))
    first = plain[0].index(stop_id)
    assert outs[0].token_ids == plain[0][:first + 1] and outs[0].finish_reason == "stop"
    for out, ref in zip(outs[1:], plain[1:]):
        cut = ref.index(stop_id) + 1 if stop_id in ref[:11] else 11
        assert out.token_ids == ref[:cut]
    assert engine.stats().speculative.acceptance_rate == 1.0
    assert_no_leak(engine)


def test_logprobs_with_speculation_match_plain_decoding(pair):
    target, draft = pair
    prompt = make_prompts(512)[3]
    params = SamplingParams(max_tokens=10, temperature=0, ignore_eos=True, logprobs=2)
    plain = Engine.from_pretrained(target).generate([prompt], params)[0]
    spec = Engine.from_pretrained(target, draft=draft, speculative_adaptive=False).generate([prompt], params)[0]
    assert spec.token_ids == plain.token_ids and len(spec.logprobs) == 10
    for a, b in zip(spec.logprobs, plain.logprobs):
        assert a.token_id == b.token_id and a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert [t for t, _ in a.top] == [t for t, _ in b.top]


def test_draft_kv_catches_up_under_preemption_prefix_caching_and_chunked_prefill(pair, tmp_path):
    """A draft with the target's own weights (a separate copy, its own KV pool) must agree on every token, and it
    only does if its KV is right: recomputed after preemption, caught up on prefix-cache hits (the draft's pool
    holds nothing for blocks another request computed), on the bonus token after a full acceptance and on the
    tokens decoded while adaptive k chose 0. Any stale or missing draft KV shows as a rejection."""
    target, _ = pair
    twin = tmp_path / "twin"
    shutil.copytree(target, twin)
    prompts = make_prompts(512)
    expected = hf_greedy(target, prompts, MAX_TOKENS)
    block = kv_block_bytes(target, twin)
    engine = Engine.from_pretrained(target, draft=twin, max_model_len=128, kv_cache_bytes=12 * block,
                                    max_num_batched_tokens=13)
    assert greedy(engine, prompts) == expected
    stats = engine.stats()
    spec = stats.speculative
    assert stats.num_preemptions > 0 and stats.prefix_cache_hit_rate > 0
    assert spec.num_plain_decodes > 0 and spec.num_verifications > 0  # k = 0 gaps, then catch-up
    assert spec.acceptance_rate == 1.0 and spec.alpha == 1.0
    assert spec.per_position_acceptance[0] == 1.0 and spec.mean_tokens_per_verification > 2
    assert_no_leak(engine)


def _record_draft_chunks(engine: Engine) -> list[tuple[int, int]]:
    """(start, tokens) of every chunk the draft model is fed from now on."""
    runner = engine.speculator.proposer.runner
    fed: list[tuple[int, int]] = []
    last_logits = runner.last_logits

    def recording(chunks):
        fed.extend((c.start, c.num_tokens) for c in chunks)
        return last_logits(chunks)
    runner.last_logits = recording
    return fed


def test_draft_reuses_its_kv_on_prefix_cache_hits(pair, tmp_path):
    """A prompt the target finds in its prefix cache is not prefilled again by the draft either, where the draft
    computed those blocks; where it did not (a request that finished at its prefill, so the draft never ran) or the
    block now holds other tokens, the draft computes them. A twin draft accepts every token only if the KV it reuses
    is its own for these very tokens."""
    target, _ = pair
    twin = tmp_path / "twin"
    shutil.copytree(target, twin)
    prompts = make_prompts(512)
    long_prompt = prompts[4]  # 37 + 64 tokens: 6 full blocks of 16 before its last token
    expected = hf_greedy(target, [long_prompt], MAX_TOKENS)
    engine = Engine.from_pretrained(target, draft=twin, speculative_adaptive=False)
    fed = _record_draft_chunks(engine)

    # the first request ends at its prefill: the target caches the blocks, the draft never computes them
    engine.generate([long_prompt], SamplingParams(max_tokens=1, temperature=0.0))
    assert fed == []
    assert greedy(engine, [long_prompt]) == expected
    # the draft first runs after the prefill's token: the prompt and that token, all of it (a target hit the draft
    # cannot use)
    assert fed[0] == (0, len(long_prompt) + 1)
    fed.clear()
    assert greedy(engine, [long_prompt]) == expected
    assert fed[0] == (96, len(long_prompt) + 1 - 96)  # now its blocks are the draft's too
    # a prompt sharing only the first two blocks (prefix[:32]) and the next 5 tokens: the draft starts at 32
    fed.clear()
    other = long_prompt[:37] + [t + 1 for t in long_prompt[37:60]]
    greedy(engine, [other])
    assert fed[0] == (32, len(other) + 1 - 32)
    spec = engine.stats().speculative
    assert spec.acceptance_rate == 1.0 and spec.num_verifications > 0
    assert_no_leak(engine)


def test_draft_kv_of_a_block_is_forgotten_when_the_block_is_cached_anew(pair, tmp_path):
    """A pool of 8 blocks, a request of 6: the next request with other tokens re-caches most of the same physical
    blocks, so when the first prompt comes back the target finds only some of its blocks, and the draft must start
    where the target does, not where its pool once held the prompt (a twin draft rejects any token computed over
    stale KV)."""
    target, _ = pair
    twin = tmp_path / "twin"
    shutil.copytree(target, twin)
    a, b = make_prompts(512)[3], make_prompts(512, seed=1)[3]  # 66 tokens each, no common block
    block = kv_block_bytes(target, twin)
    engine = Engine.from_pretrained(target, draft=twin, max_model_len=128, kv_cache_bytes=8 * block,
                                    speculative_adaptive=False)
    fed = _record_draft_chunks(engine)
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    cached = []
    for prompt in (a, b, a):
        fed.clear()
        out = engine.generate([prompt], params)[0]
        assert out.token_ids == hf_greedy(target, [prompt], MAX_TOKENS)[0]
        assert fed[0] == (out.num_cached_tokens, len(prompt) + 1 - out.num_cached_tokens)
        cached.append(out.num_cached_tokens)
    assert cached[:2] == [0, 0] and 0 < cached[2] < 64  # the second request took over some blocks of the first
    assert engine.stats().speculative.acceptance_rate == 1.0
    assert_no_leak(engine)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_triton_backend_verifies_draft_tokens(pair, device):
    """The Triton paged-attention kernel (the interpreter on CPU) attends the (k+1)-token verification chunks and
    writes the draft's own KV pool."""
    target, draft = pair
    prompts = make_prompts(512)[:4]
    engine = Engine.from_pretrained(target, draft=draft, device=device, dtype="float32", attention_backend="triton",
                                    max_model_len=128, max_num_batched_tokens=24, num_speculative_tokens=3,
                                    speculative_adaptive=False)
    assert engine.runner.attention_backend.name == "triton"
    assert greedy(engine, prompts, 8) == hf_greedy(target, prompts, 8)
    assert engine.stats().speculative.num_accepted_tokens > 0
    assert_no_leak(engine)


def test_greedy_identity_with_a_reduced_draft_vocabulary(pair):
    """The draft scores 64 of 512 ids plus the tokens it is fed: the target's greedy tokens are unchanged, the
    draft never proposes a token outside its rows, and the rows grew with the prompts and outputs."""
    target, draft = pair
    prompts = make_prompts(512)
    plain = greedy(Engine.from_pretrained(target), prompts)
    engine = Engine.from_pretrained(target, draft=draft, speculative_adaptive=False, draft_vocab_size=64)
    head = engine.speculator.proposer.runner.head
    assert head is not None and head.num_rows <= 128
    proposed: list[int] = []
    original = engine.speculator.proposer.propose

    def recording(items, *args):
        original(items, *args)
        proposed.extend(t for seq, _ in items for t in seq.spec_token_ids)

    engine.speculator.proposer.propose = recording
    assert greedy(engine, prompts) == plain
    assert head.num_rows > 64 and proposed and all(t in head.kept for t in proposed)
    assert engine.stats().speculative.num_accepted_tokens > 0
    assert_no_leak(engine)


def test_engine_as_draft_shares_its_weights(pair):
    target, draft = pair
    small = Engine.from_pretrained(draft)
    prompts = make_prompts(512)[:4]
    small_before = greedy(small, prompts)
    large = Engine.from_pretrained(target, draft=small, speculative_adaptive=False)
    assert large.speculator.proposer.runner.model is small.runner.model  # no second copy
    assert greedy(large, prompts) == greedy(Engine.from_pretrained(target), prompts)
    assert greedy(small, prompts) == small_before  # the small tier's own cache and outputs are untouched
    assert large.stats().speculative.num_accepted_tokens > 0


def test_rejections_leak_no_blocks(pair, bad_draft):
    """A draft that is nearly always wrong, forced to keep drafting, with preemptions and prefix caching: every
    step, computed counts stay within the blocks and the draft never runs ahead; at the end every block is free."""
    target, _ = pair
    block = kv_block_bytes(target, bad_draft)
    engine = Engine.from_pretrained(target, draft=bad_draft, max_model_len=128, kv_cache_bytes=12 * block,
                                    max_num_batched_tokens=20, speculative_adaptive=False)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, 512, (int(n),), generator=g).tolist() for n in torch.randint(1, 60, (10,), generator=g)]
    for i, p in enumerate(prompts):
        engine.add_request(p, SamplingParams(max_tokens=20 + i, temperature=0.0 if i % 2 else 0.9, seed=i,
                                             ignore_eos=True))
    bs = engine.config.block_size
    while engine.has_unfinished_requests():
        engine.step()
        for seq in engine.scheduler.running:
            assert seq.num_computed_tokens < seq.num_tokens and seq.num_computed_tokens <= len(seq.blocks) * bs
            assert seq.num_draft_computed_tokens <= seq.num_computed_tokens
            assert not seq.spec_token_ids
    stats = engine.stats()
    assert stats.num_preemptions > 0
    assert stats.speculative.num_draft_tokens > 100 and stats.speculative.acceptance_rate < 0.3
    assert_no_leak(engine)


def test_greedy_identity_with_adaptive_k_and_the_confidence_stop(pair):
    """The engine's default speculation (adaptive k, drafts that stop on the draft's confidence): the target's
    greedy tokens, and the stop rule was asked."""
    target, draft = pair
    prompts = make_prompts(512)
    plain = greedy(Engine.from_pretrained(target), prompts, max_tokens=48)
    engine = Engine.from_pretrained(target, draft=draft)
    controller = engine.speculator.controller
    asked = []
    original = controller.keep_drafting
    controller.keep_drafting = lambda drafts, tokens: asked.append(controller.stopping) or original(drafts, tokens)
    assert greedy(engine, prompts, max_tokens=48) == plain
    assert asked and engine.stats().speculative.num_accepted_tokens > 0
    assert_no_leak(engine)


def test_adaptive_k_switches_a_bad_draft_off(pair, bad_draft):
    target, _ = pair
    engine = Engine.from_pretrained(target, draft=bad_draft)
    greedy(engine, make_prompts(512)[:2], max_tokens=64)
    stats = engine.stats().speculative
    assert stats.num_plain_decodes > stats.num_verifications  # it stopped drafting once acceptance was seen
    assert_no_leak(engine)


def test_vocabulary_mismatch_is_refused_at_construction(pair, tmp_path):
    target, draft = pair
    other_size = create_random_checkpoint(tmp_path / "bigger", "llama", vocab_size=640, num_layers=1)
    with pytest.raises(ValueError, match=r"bigger.*640 tokens.*target.*512"):
        Engine.from_pretrained(target, draft=other_size)
    other_tokenizer = tmp_path / "other-tokenizer"
    shutil.copytree(draft, other_tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(create_random_checkpoint(tmp_path / "t300", "llama", vocab_size=300, num_layers=1) / name,
                    other_tokenizer / name) if not (tmp_path / "t300" / name).exists() else \
            shutil.copy(tmp_path / "t300" / name, other_tokenizer / name)
    with pytest.raises(ValueError, match="different tokenizer vocabularies"):
        Engine.from_pretrained(target, draft=other_tokenizer)
    with pytest.raises(ValueError, match="needs a draft model"):
        Engine.from_pretrained(target, speculative="draft")


# ---- the exact distribution --------------------------------------------------------------------------------


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's test of counts against probs; cells expected below 5 are pooled."""
    n = counts.sum()
    expected = probs.double() * n
    small = expected < 5
    obs = torch.cat([counts[~small].double(), counts[small].double().sum().reshape(1)])
    exp = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    dof = len(obs) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), stat / 2))


@pytest.mark.parametrize("with_q", [True, False])
def test_rejection_sampler_reproduces_the_target_distribution(with_q):
    """One position, many draws: whatever q proposes, the emitted token is distributed as p."""
    g = torch.Generator().manual_seed(0)
    vocab, n = 8, 6000
    p = torch.softmax(torch.randn(2, vocab, generator=g) * 1.5, dim=-1)
    q = torch.softmax(torch.randn(1, vocab, generator=g) * 1.5, dim=-1)
    counts = torch.zeros(vocab)
    for i in range(n):
        draft = int(torch.multinomial(q[0], 1, generator=g)) if with_q else i % vocab
        counts[verify_one(p, [draft], q if with_q else None, g)[0]] += 1
    assert chi_square_p_value(counts, p[0]) > 1e-3


@pytest.fixture(scope="module")
def tiny_vocab_pairs(tmp_path_factory):
    """hidden -> token-id-only Llamas with a 24-token vocabulary (no tokenizer) of that width: a 2-layer target and,
    as its draft, the same weights less the second layer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    made = {}

    def make(hidden: int):
        if hidden not in made:
            root = tmp_path_factory.mktemp(f"tiny-vocab-{hidden}")
            config = LlamaConfig(vocab_size=24, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                 initializer_range=0.3 * (32 / hidden) ** 1.5, bos_token_id=0, eos_token_id=1,
                                 pad_token_id=2)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                target = LlamaForCausalLM(config).eval()
            target.save_pretrained(root / "target")
            draft = LlamaForCausalLM(LlamaConfig(**{**config.to_dict(), "num_hidden_layers": 1})).eval()
            draft.load_state_dict({k: v for k, v in target.state_dict().items() if ".layers.1." not in k})
            draft.save_pretrained(root / "draft")
            made[hidden] = root / "target", root / "draft"
        return made[hidden]
    return make


def exact_marginals(path, prompt: list[int], params: SamplingParams, steps: int) -> list[torch.Tensor]:
    """The target's exact marginal distribution of output tokens 1..steps under `params`, by enumeration."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    contexts = torch.tensor([prompt])
    weights = torch.ones(1, dtype=torch.float64)
    marginals = []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(contexts).logits[:, -1].float()
            probs = processed_probs(logits, [params] * len(contexts)).double()
            joint = weights[:, None] * probs  # [contexts, vocab]
            marginals.append(joint.sum(0))
            contexts = torch.cat([contexts.repeat_interleave(vocab, 0), torch.arange(vocab).repeat(len(contexts))[:, None]],
                                 dim=1)
            weights = joint.reshape(-1)
    return marginals


@pytest.mark.parametrize("params,draft_vocab,stop_below,hidden", [
    (SamplingParams(max_tokens=4, temperature=1.0, ignore_eos=True), 0, None, 32),
    (SamplingParams(max_tokens=4, temperature=0.8, top_k=12, top_p=0.9, ignore_eos=True), 0, None, 32),
    (SamplingParams(max_tokens=4, temperature=1.0, ignore_eos=True), 4, None, 32),
    (SamplingParams(max_tokens=4, temperature=1.0, ignore_eos=True), 4, None, 128),
    (SamplingParams(max_tokens=4, temperature=1.0, ignore_eos=True), 0, 0.3, 32)],
    ids=["plain", "top-k-top-p", "plain-reduced-draft-vocabulary", "reduced-draft-vocabulary-as-q5_0",
         "confidence-stop"])
def test_speculative_sampling_matches_the_target_distribution(tiny_vocab_pairs, params, draft_vocab, stop_below,
                                                              hidden):
    """Output tokens 2 and 3 come from verification (token 1 from the prefill): over 2,000 fixed seeds their
    empirical distributions match the target's exact marginals (chi-square). With a reduced draft vocabulary (ids
    0-3, the prompt's tokens, then what the draft is fed, at most 8 of 24) the draft's q is zero outside its rows:
    the residual distribution must supply those tokens. With a stop on the draft's confidence (here: after a token
    of q at most stop_below) how many tokens are drafted depends on what was sampled, and must not bias it. Rows 128
    wide: the draft's kept rows are Q5_0 where native kernels run (its q is theirs)."""
    target, draft = tiny_vocab_pairs(hidden)
    prompt = [3, 9, 4, 17, 5]
    engine = Engine.from_pretrained(target, draft=draft, num_speculative_tokens=2, speculative_adaptive=False,
                                    draft_vocab_size=draft_vocab)
    head = engine.speculator.proposer.runner.head
    assert (head is not None) == bool(draft_vocab)
    if head is not None and hidden % 128 == 0 and native_library() is not None:
        assert head.rows.dtype == torch.uint8  # Q5_0_R rows
    if stop_below is not None:
        engine.speculator.controller.keep_drafting = lambda drafts, _: [c[-1] > stop_below for _, c in drafts]
    n = 2000
    seeded = [SamplingParams(**{**params.__dict__, "seed": seed}) for seed in range(n)]
    outs = engine.generate([prompt] * n, seeded)
    tokens = torch.tensor([o.token_ids for o in outs])
    stats = engine.stats().speculative
    assert stats.num_draft_tokens > 2000 and 0.2 < stats.acceptance_rate < 0.95  # both branches well exercised
    if stop_below is not None:  # some drafts stopped after one token, some did not
        assert stats.num_verifications < stats.num_draft_tokens < 2 * stats.num_verifications
    marginals = exact_marginals(target, prompt, params, 3)
    for position in (1, 2):
        counts = torch.bincount(tokens[:, position], minlength=24).double()
        assert chi_square_p_value(counts, marginals[position]) > 1e-3, f"output token {position + 1}"
    assert_no_leak(engine)


# ---- units ---------------------------------------------------------------------------------------------------


def test_ngram_lookup_copies_the_latest_continuation():
    proposer = NgramProposer(1, 3)
    assert proposer.lookup([1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3], 3) == [7, 8, 1]
    assert proposer.lookup([5, 6, 7], 2) == []
    assert proposer.lookup([4, 1, 4], 4) == [1, 4]


def test_acceptance_and_cost_estimates():
    est = AcceptanceEstimate(0.0, 0.0)
    for _ in range(30):
        est.update(4, 4)
    assert est.alpha == 1.0
    est.update(4, 0)
    assert est.alpha < 1.0
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)
    cost = CostModel()
    cost.observe(1, 1.0)
    cost.observe(40, 5.0)
    assert cost.estimate(20) == pytest.approx(1.0 + 4.0 * 19 / 39)
    assert cost.estimate(80) == pytest.approx(5.0 + 4.0 / 39 * 40)


def decoding_sequences(n: int, alpha: float) -> list[Sequence]:
    seqs = []
    for i in range(n):
        seq = Sequence(f"r{i}", [5] * 40, SamplingParams(max_tokens=100, temperature=0.0))
        seq.num_computed_tokens = seq.num_tokens - 1
        seq.spec_acceptance = AcceptanceEstimate(alpha * 10, 10.0)
        seqs.append(seq)
    return seqs


def test_adaptive_k_follows_measured_costs():
    """k maximises expected tokens per second under the measured costs: on a CPU whose matmuls cost the same for
    1-3 rows and double at 4 rows, batch 1 speculates k = 2; at batch 8, where every extra row costs nearly as
    much as a plain decode, it switches speculation off; with a poor acceptance it stays off at batch 1 too."""
    controller = SpecController(max_k=4, confidence_stop=False)
    for tokens, seconds in [(1, 1.0), (3, 1.05), (5, 2.0), (8, 3.0), (16, 6.0), (32, 12.0), (40, 15.0)]:
        controller.observe_target(tokens, seconds)
    controller.observe_draft(1, 0.1)
    controller.observe_draft(8, 0.3)
    one = decoding_sequences(1, 0.9)
    assert controller.plan(one, 1024, 0) == 2 and one[0].num_lookahead_tokens == 2
    eight = decoding_sequences(8, 0.9)
    assert controller.plan(eight, 1024, 0) == 0 and all(s.num_lookahead_tokens == 0 for s in eight)
    assert controller.plan(decoding_sequences(1, 0.1), 1024, 0) == 0
    # never past max_tokens: a request one token from its end is not given draft tokens
    last = decoding_sequences(1, 0.9)[0]
    last.params = SamplingParams(max_tokens=1, temperature=0.0)
    controller.plan([last], 1024, 0)
    assert last.num_lookahead_tokens == 0


def test_confidence_stop_drafts_while_one_more_token_pays():
    """Measured costs: a draft forward 0.3 s, a target step 1.0 s + 0.1 s per token. Once speculation wins, a
    request may draft up to 4 tokens; after each it drafts one more while P * alpha * C > E * (0.3 + 0.1): a token
    of confidence 0.95 goes on, 0.4 stops (0.504 < 0.56 at one token), and so does a long run whose P has shrunk.
    Probes and fixed k draft their k."""
    def controller(**kw) -> SpecController:
        c = SpecController(max_k=4, **kw)
        for tokens in (1, 2, 3, 4, 5, 8, 16):
            c.observe_target(tokens, 1.0 + 0.1 * (tokens - 1))
        c.observe_draft(1, 0.3)
        c.observe_draft(2, 0.35)
        return c

    c = controller()
    one = decoding_sequences(1, 0.9)
    assert c.plan(one, 1024, 0) == 4 and one[0].num_lookahead_tokens == 4 and c.stopping
    seq = one[0]
    assert c.keep_drafting([(seq, [0.95])], 2) == [True]
    assert c.keep_drafting([(seq, [0.4])], 2) == [False]
    assert c.keep_drafting([(seq, [0.99, 0.98, 0.97])], 4) == [True]
    assert c.keep_drafting([(seq, [0.9, 0.7, 0.6])], 4) == [False]
    two = decoding_sequences(2, 0.9)
    c.plan(two, 1024, 0)
    assert c.keep_drafting([(two[0], [0.99]), (two[1], [0.2])], 4) == [True, False]
    fixed = controller(adaptive=False)
    fixed.plan(one, 1024, 0)
    assert not fixed.stopping and fixed.keep_drafting([(seq, [0.01])], 2) == [True]
    off = controller(confidence_stop=False)
    assert off.plan(one, 1024, 0) < 4 and not off.stopping
    probing = SpecController(max_k=4)  # no costs measured: the first steps time each step size
    k = probing.plan(decoding_sequences(1, 0.9), 1024, 0)
    assert not probing.stopping and probing.keep_drafting([(seq, [0.01] * k)], 1 + k) == [True]


def test_confidence_is_read_through_the_acceptance_measured_at_it():
    """Unmeasured, a confidence is its own chance of acceptance. A draft whose tokens of confidence 0.03 are
    accepted 90% of the time (the random pair's one-layer draft: a flat distribution whose argmax agrees with the
    target's) reads 0.03 as ~0.9 once that is measured, and keeps drafting where the confidence alone stops it;
    other bins keep their own figures. Only tokens up to the first rejection count: those after it were never
    judged."""
    cal = ConfidenceCalibration()
    assert cal.probability(0.03) == pytest.approx(0.03) and cal.probability(0.95) == pytest.approx(0.95)
    cal.update([0.5, 0.5, 0.5], 1)  # one success, one failure, the third not judged
    b = ConfidenceCalibration._bin(0.5)
    assert cal.accepted[b] == pytest.approx(1.0, abs=0.01) and cal.trials[b] == pytest.approx(2.0, abs=0.01)

    c = SpecController(max_k=4)
    for tokens in (1, 2, 3, 4, 5, 8, 16):
        c.observe_target(tokens, 1.0 + 0.1 * (tokens - 1))
    c.observe_draft(1, 0.3)
    one = decoding_sequences(1, 0.9)
    assert c.plan(one, 1024, 0) == 4 and c.stopping
    seq = one[0]
    assert c.keep_drafting([(seq, [0.03])], 2) == [False]
    for i in range(200):  # 9 of 10 verifications accept both tokens, the others reject the first
        accepted = 2 if i % 10 else 0
        c.record(seq, 2, accepted, [0.03, 0.02])
    assert c.calibration.probability(0.03) == pytest.approx(0.9, abs=0.05)
    assert c.calibration.probability(0.95) == pytest.approx(0.95)
    assert c.keep_drafting([(seq, [0.03])], 2) == [True]
    c.record(seq, 2, 1, [0.03])  # confidences that do not match the draft tokens are not used
    assert c.calibration.probability(0.03) == pytest.approx(0.9, abs=0.05)


def test_a_nan_confidence_counts_as_none():
    """A draft whose logits went NaN gives its token a NaN confidence: it reads as no confidence (the lowest bin),
    never an error that fails the request."""
    cal = ConfidenceCalibration()
    assert ConfidenceCalibration._bin(float("nan")) == ConfidenceCalibration._bin(0.0) == 0
    cal.update([float("nan"), 0.5], 0)
    assert cal.trials[0] == pytest.approx(1.0) and cal.accepted[0] == 0.0
    assert cal.probability(float("nan")) == cal.probability(0.0)


def test_a_new_request_gets_to_show_its_own_acceptance():
    """Costs where speculation pays at alpha 0.9 and not at 0.5 (a target step 1.0 s + 0.1 s a token, a draft
    forward 0.5 s). A first request accepts half its draft tokens and drags the engine-wide rate down; the next request, whose
    draft guesses well, still speculates from its first step (it is not judged on the last request's rate) and
    keeps speculating; one whose draft guesses badly is switched off after a few verifications of its own."""
    def controller() -> SpecController:
        c = SpecController(max_k=4, confidence_stop=False)
        for tokens in (1, 2, 3, 4, 5, 8, 16):
            c.observe_target(tokens, 1.0 + 0.1 * (tokens - 1))
        c.observe_draft(1, 0.5)
        bad = decoding_sequences(1, 0.5)[0]
        bad.spec_acceptance = None
        for _ in range(30):
            c.record(bad, 2, 1)
        assert c.global_alpha.alpha < 0.55
        return c

    def run(c: SpecController, accept: bool) -> list[int]:
        seq = decoding_sequences(1, 0.0)[0]
        seq.spec_acceptance = None
        ks = []
        for _ in range(12):
            k = c.plan([seq], 1024, 0)
            ks.append(k)
            if k:
                c.record(seq, k, k if accept else 0)
        return ks

    good = run(controller(), accept=True)
    assert all(good), good
    bad = run(controller(), accept=False)
    assert bad[0] > 0 and not any(bad[4:]), bad


def test_a_request_switched_off_is_judged_afresh_at_doubling_intervals():
    """Costs where speculation pays at alpha 0.9 and not at 0.5. A request whose draft stops guessing well is
    switched off; when its draft would guess well again (prose, then code), it speculates again within RETRY_AFTER
    steps. One whose draft never guesses well pays a few verifications at ever longer intervals: over 2,000 steps
    it starts afresh a few times (with the cost model's own probes), speculating in under 2% of its steps."""
    from tiers.engine.spec_decode.adaptive import RETRY_AFTER

    def controller() -> SpecController:
        c = SpecController(max_k=4, confidence_stop=False)
        for tokens in (1, 2, 3, 4, 5, 8, 16):
            c.observe_target(tokens, 1.0 + 0.1 * (tokens - 1))
        c.observe_draft(1, 0.5)
        return c

    def run(c: SpecController, accepts: callable, steps: int) -> list[int]:
        seq = decoding_sequences(1, 0.0)[0]
        seq.params = SamplingParams(max_tokens=10 ** 6, temperature=0.0)
        seq.spec_acceptance = None
        ks = []
        for step in range(steps):
            k = c.plan([seq], 10 ** 6, 0)
            ks.append(k)
            if k:
                c.record(seq, k, k if accepts(step) else 0)
        return ks

    turns = run(controller(), lambda step: step < 10 or step >= 40, 160)
    off = turns.index(0)
    assert off <= 20 and sum(k > 0 for k in turns[off:40]) <= 3, turns  # off while its draft guesses badly
    back = next(i for i in range(40, 160) if all(turns[i:i + 10]))
    # on again soon after it guesses well, but for the cost model's probes of k = 0
    assert back < 40 + 4 * RETRY_AFTER and turns[back:].count(0) <= 2, turns

    bad = run(controller(), lambda step: False, 2000)
    starts = [i for i in range(1, 2000) if bad[i] and not bad[i - 1]]
    assert 3 <= len(starts) <= 2000 // RETRY_AFTER // 4, starts  # a constant interval would make ~110
    assert sum(k > 0 for k in bad) < 0.02 * 2000


def test_cost_estimates_shed_a_cold_first_forward():
    """A bucket's first observations weigh alike (a cold 3 s forward among 1 s ones is gone in a few), and a
    forward of fewer tokens is never estimated above a larger one's measurement."""
    cost = CostModel()
    cost.observe(1, 3.0)
    for _ in range(4):
        cost.observe(1, 1.0)
    assert cost.estimate(1) == pytest.approx(1.4)
    stale = CostModel()
    stale.observe(1, 2.0)
    stale.observe(2, 1.2)
    stale.observe(4, 1.5)
    assert stale.estimate(1) == pytest.approx(1.2) and stale.estimate(3) == pytest.approx(1.35)


def test_adaptive_k_measures_every_step_size_once():
    """Costs are not smooth in the token count, so before trusting an estimate the controller tries each step
    size a k would give (k = 0 included)."""
    controller = SpecController(max_k=4)
    controller.observe_target(1, 1.0)
    controller.observe_draft(1, 0.1)
    tried = set()
    for _ in range(3):
        k = controller.plan(decoding_sequences(1, 0.9), 1024, 0)
        controller.observe_target(1 + k, 1.0 + 0.1 * k)
        tried.add((1 + k).bit_length())
    assert tried == {2, 3}  # 2-3 and 4-7 tokens: the buckets it had not seen


def test_leviathan_prediction():
    from benchmarks.speculative import leviathan_speedup

    assert leviathan_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 1.2))
    assert leviathan_speedup(1.0, 3, 0.0) == 4.0 and leviathan_speedup(0.0, 2, 0.1) == pytest.approx(1 / 1.2)


def test_the_benchmark_speedup_interval_is_over_the_calls():
    """The benchmark's per-call interval: the ratio of the sums, bounded by the calls' own ratios, and refused for
    calls that do not pair up."""
    from benchmarks.speculative_report import speedup_interval

    value, lo, hi = speedup_interval([4.0, 4.0, 4.0, 4.0], [2.0, 3.0, 4.0, 2.0])
    assert value == pytest.approx(16 / 11)
    assert 1.0 <= lo < value < hi <= 2.0  # a resample of calls lies between the slowest and the fastest call
    assert speedup_interval([2.0, 3.0], [2.0, 3.0]) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="same calls"):
        speedup_interval([1.0, 2.0], [1.0])


def test_the_benchmark_times_each_call_on_every_system_back_to_back():
    """A drift of the machine's speed must reach the target alone and the speculative systems alike: each timed call
    runs on every system in turn, the first system rotating from call to call and from repeat to repeat, and each
    system keeps its own calls' timings and tokens."""
    from types import SimpleNamespace

    from benchmarks import speculative

    order: list[tuple[str, int]] = []

    class Recorder:
        speculator = None

        def __init__(self, name: str) -> None:
            self.name = name

        def generate(self, prompts, params):
            order.append((self.name, prompts[0][0]))
            return [SimpleNamespace(token_ids=[p[0], 7]) for p in prompts]

        def stats(self):
            return SimpleNamespace(speculative=None)

    names = ["target alone", "a", "b"]
    calls = {b: [[[10 * b + i]] for i in range(4)] for b in speculative.BATCH_SIZES}
    workload = speculative.Workload("fake", None, {b: [[[-1]]] for b in speculative.BATCH_SIZES}, calls)
    runs = speculative.measure({n: Recorder(n) for n in names}, workload, repeats=2)
    timed = [o for o in order if o[1] != -1]
    batch1 = timed[:2 * 4 * 3]
    for rep in range(2):
        for i in range(4):
            turn = (rep + i) % 3
            got = batch1[(rep * 4 + i) * 3:(rep * 4 + i + 1) * 3]
            assert got == [(n, 10 + i) for n in names[turn:] + names[:turn]]
    assert [(r.system, r.batch) for r in runs] == [(n, b) for b in speculative.BATCH_SIZES for n in names]
    for r in runs:
        assert len(r.call_seconds) == 4 and r.tokens == [[10 * r.batch + i, 7] for i in range(4)]


def test_draft_slots_never_take_the_blocks_others_need():
    """Two decoding sequences each at a block boundary, two free blocks: both decode, neither gets draft slots
    that would leave the other without a block (which would preempt it); with room to spare, both speculate."""
    from tiers.engine.block_manager import BlockManager
    from tiers.engine.scheduler import Scheduler

    def run(num_blocks: int) -> dict[str, int]:
        scheduler = Scheduler(BlockManager(num_blocks, 4, False), max_num_seqs=8, max_num_batched_tokens=64)
        seqs = [Sequence(name, list(range(start, start + 8)), SamplingParams(max_tokens=50))
                for name, start in (("a", 100), ("b", 200))]
        for s in seqs:
            scheduler.add(s)
        for s in scheduler.schedule().scheduled:  # the prefills: 2 blocks each, both full
            s.seq.num_computed_tokens += s.num_new_tokens
            s.seq.token_ids.append(7)
            s.seq.num_lookahead_tokens = 4
        out = scheduler.schedule()
        assert not out.preempted
        return {s.seq.request_id: s.num_new_tokens for s in out.scheduled}

    assert run(6) == {"a": 1, "b": 1}  # 2 free blocks: one each for the next token, none for drafts
    assert run(10) == {"a": 5, "b": 5}


def test_adaptive_k_probes_less_while_speculation_keeps_losing():
    """At batch 8 on a CPU speculation loses; the controller still re-measures now and then, but each probe that
    confirms k = 0 doubles the time until the next, so over 4,000 steps it probes a few times, not every 128."""
    def probes(steps: int) -> int:
        controller = SpecController(max_k=4)
        for tokens, seconds in [(1, 1.0), (3, 1.05), (5, 2.0), (8, 3.0), (16, 6.0), (32, 12.0), (40, 15.0)]:
            controller.observe_target(tokens, seconds)
        controller.observe_draft(8, 0.3)
        count = 0
        for _ in range(steps):
            k = controller.plan(decoding_sequences(8, 0.9), 1024, 0)
            tokens = 8 * (1 + k)
            controller.observe_target(tokens, 3.0 * tokens / 8 * 0.95)  # each extra row nearly a whole decode
            if k:
                controller.observe_draft(8, 0.3)
                count += 1
        return count

    assert probes(4000) <= 12
    assert probes(4000) < probes(4000 // 8) * 8 / 2  # far fewer than a constant rate would give


def test_adaptive_k_skips_probes_whose_draft_catch_up_costs_too_much():
    """A probe of k > 0 makes the draft catch up on every token it skipped: with 8 requests 30 tokens behind (240
    tokens, measured at 12 s of draft time; the budget is 0.1 x 32 plain steps of 3 s) the controller does not probe;
    with the draft caught up it probes as before."""
    def probes(behind: int) -> int:
        controller = SpecController(max_k=4)
        for tokens, seconds in [(1, 1.0), (3, 1.05), (5, 2.0), (8, 3.0), (16, 6.0), (32, 12.0), (40, 15.0)]:
            controller.observe_target(tokens, seconds)
        controller.observe_draft(8, 0.3)
        controller.observe_draft(240, 12.0)
        count = 0
        for _ in range(1000):
            seqs = decoding_sequences(8, 0.9)
            for seq in seqs:
                seq.num_draft_computed_tokens = seq.num_tokens - 1 - behind
            k = controller.plan(seqs, 1024, 0)
            controller.observe_target(8 * (1 + k), 3.0 * (1 + k) * 0.95)
            count += k > 0
        return count

    assert probes(30) == 0
    assert probes(0) > 0
