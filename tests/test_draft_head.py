"""DraftHead: the draft's output matrix cut to some tokens computes each kept token's logit as the full head does (the
native kernels: bit for bit, each row's dot product alone; a float head: torch's GEMM, whose blocking may follow the
row count), or with its rows as Q5_0 where that reads fewer bytes, -inf for the others, and keeps the tokens it is
offered up to its capacity."""
import numpy as np
import pytest
import torch
from torch import nn

from tests.kquant_helpers import emulate, make_blocks
from tiers.engine.spec_decode.draft_head import DraftHead
from tiers.native import native_library
from tiers.quantization.int8 import quantize_int8
from tiers.quantization.kquant import KQuantWeight, row_bytes
from tiers.quantization.linear import QuantizedLinear

VOCAB, HIDDEN, SIZE = 1000, 256, 100
needs_native = pytest.mark.skipif(native_library() is None, reason="the native kernel does not build here")


def float_head() -> nn.Linear:
    torch.manual_seed(0)
    head = nn.Linear(HIDDEN, VOCAB, bias=False)
    nn.init.normal_(head.weight, std=0.05)
    return head


def heads() -> list:
    out = [pytest.param(float_head, id="float")]
    out.append(pytest.param(lambda: QuantizedLinear(quantize_int8(float_head().weight, blockwise=True),
                                                    kernel="cpu_w8a32"), id="int8-w8a32", marks=needs_native))
    out.append(pytest.param(lambda: QuantizedLinear(quantize_int8(float_head().weight, blockwise=True),
                                                    kernel="cpu_w8a8"), id="int8-w8a8", marks=needs_native))
    blocks = lambda: torch.from_numpy(make_blocks("Q6_K", VOCAB, HIDDEN, np.random.default_rng(0)))
    out.append(pytest.param(lambda: QuantizedLinear(KQuantWeight([("Q6_K", blocks())], HIDDEN)), id="q6_k",
                            marks=needs_native))
    return out


@pytest.mark.parametrize("make_head", heads())
def test_kept_logits_are_the_full_heads(make_head):
    head = make_head()
    draft = DraftHead.build(head, VOCAB, SIZE, always=(998, 5), compact=False)
    draft.add([700, 701, 700, 5, -3, VOCAB + 4])  # repeats, kept ones and ids out of range
    kept = torch.cat((torch.arange(SIZE), torch.tensor([998, 700, 701])))
    assert draft.num_rows == len(kept) and sorted(draft.token_ids[:draft.num_rows].tolist()) == sorted(kept.tolist())
    torch.manual_seed(1)
    for rows in (1, 3):
        x = torch.randn(rows, HIDDEN)
        with torch.no_grad():
            full = head(x).float()
        got = draft.logits(x)
        assert got.shape == (rows, VOCAB) and got.dtype == torch.float32
        if isinstance(head, QuantizedLinear):
            assert torch.equal(got[:, kept], full[:, kept])
        else:
            torch.testing.assert_close(got[:, kept], full[:, kept], rtol=1e-5, atol=1e-6)
        outside = torch.ones(VOCAB, dtype=torch.bool)
        outside[kept] = False
        assert torch.isneginf(got[:, outside]).all()
    assert draft.logits(torch.randn(1, HIDDEN)).argmax().item() in set(kept.tolist())


@pytest.mark.parametrize("make_head", heads())
def test_a_greedy_draft_token_from_the_kept_rows_is_the_whole_vocabularys(make_head):
    """The proposer picks from the kept rows without spreading them over the vocabulary: the same token as
    torch.argmax over the whole row (-inf elsewhere), ties going to the least token id, and the same confidence."""
    from tiers.engine.spec_decode.proposer import _argmax_prob

    draft = DraftHead.build(make_head(), VOCAB, SIZE, always=(998, 5))
    draft.add([700, 3, 701])
    torch.manual_seed(2)
    x = torch.randn(4, HIDDEN)
    kept = draft.kept_logits(x)
    assert kept.token_ids[SIZE:].tolist() == [998, 700, 701]
    kept.values[3, SIZE] = kept.values[3, SIZE + 2] = kept.values[3].max() + 1  # a tie: the later row, the lesser id
    full = kept.full()
    tokens, confidence = _argmax_prob(kept)
    assert torch.equal(tokens, full.argmax(-1)) and tokens[3] == 701
    torch.testing.assert_close(confidence, torch.softmax(full.double(), -1).max(-1).values.float())


@needs_native
@pytest.mark.parametrize("make_head", heads())
def test_compact_rows_are_the_heads_rows_as_q5_0(make_head):
    """Rows wider than Q5_0's 5.5 bits a weight are kept as Q5_0 (gguf's quantizer, ggml's rule) and run on the
    Q5_0_R kernel: each kept logit is the product with those rows, as the kernel computes with int8 activations."""
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    head = make_head()
    draft = DraftHead.build(head, VOCAB, SIZE, always=(998,))
    draft.add([700, 3])
    kept = draft.token_ids[:draft.num_rows]
    assert draft.rows.dtype == torch.uint8 and draft.rows.shape[1] == row_bytes("Q5_0_R", HIDDEN)
    assert draft.rows.shape[1] < draft.source[0].numel() * draft.source.element_size()
    full = head.dequantized_weight() if isinstance(head, QuantizedLinear) else head.weight.detach()
    q5 = GGMLQuantizationType.Q5_0
    rows_q5 = torch.from_numpy(dequantize(quantize(full[kept].float().numpy(), q5), q5).copy())
    torch.manual_seed(3)
    for rows in (1, 4):
        x = torch.randn(rows, HIDDEN)
        got, want = draft.kept_logits(x).values, emulate(x, rows_q5)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
        assert (got - x @ full[kept].float().T).abs().max() > 1e-3  # Q5_0's rows, not the head's own


def test_rows_as_small_as_q5_0_or_of_another_width_stay_the_heads():
    blocks = torch.from_numpy(make_blocks("Q4_K", VOCAB, HIDDEN, np.random.default_rng(4)))
    for head in ([QuantizedLinear(KQuantWeight([("Q4_K", blocks)], HIDDEN))] if native_library() else []) + [
            nn.Linear(160, VOCAB, bias=False)]:  # 4.5 bits a weight; rows of 160, not whole Q5_0_R groups of 128
        draft = DraftHead.build(head, VOCAB, SIZE)
        assert draft.rows.dtype == draft.source.dtype and draft.rows.shape[1:] == draft.source.shape[1:]
        assert torch.equal(draft.rows[:SIZE], draft.source[:SIZE])


def test_rows_stop_at_twice_the_size_and_the_source_is_untouched():
    head = float_head()
    before = head.weight.clone()
    draft = DraftHead.build(head, VOCAB, SIZE)
    draft.add(range(SIZE, VOCAB))
    assert draft.num_rows == 2 * SIZE
    assert draft.token_ids[:draft.num_rows].tolist() == list(range(2 * SIZE))  # first offered, first kept
    assert torch.equal(head.weight, before)
    draft.add([900])  # full: ignored
    assert 900 not in draft.kept and torch.isneginf(draft.logits(torch.randn(1, HIDDEN))[0, 900])


def test_applies_only_where_it_can_pay_and_compute_exactly():
    head = float_head()
    assert DraftHead.build(head, VOCAB, SIZE) is not None
    assert DraftHead.build(head, VOCAB, 0) is None  # switched off
    assert DraftHead.build(head, VOCAB, VOCAB // 2) is None  # twice the size covers the vocabulary
    biased = nn.Linear(HIDDEN, VOCAB)
    assert DraftHead.build(biased, VOCAB, SIZE) is None
    assert DraftHead.build(nn.Linear(HIDDEN, VOCAB, bias=False, device="meta"), VOCAB, SIZE) is None  # not on CPU
