"""`aio router explain`: scores, thresholds in force, the tier and the reason."""
from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from aio.commands.router_explain import explanation
from aio.routing import Router


class FixedClassifier:
    version = "fixed-1"
    kind = "fixed"

    def __init__(self, proba):
        self.proba = np.asarray(proba, dtype=np.float64)

    def predict_proba(self, texts):
        return np.tile(self.proba, (len(texts), 1))


TIERS = ["small", "medium", "large"]


def test_explanation_names_scores_thresholds_tier_and_reason():
    router = Router(FixedClassifier([0.3, 0.4, 0.3]), TIERS, quality=0.5, offsets={"small": 0.1})
    lines = explanation(router, router.classifier.proba, None, False)
    text = "\n".join(lines)
    assert "fixed-1" in lines[0]
    assert "small 0.300  medium 0.400  large 0.300" in text
    assert any(line.startswith("small") and "0.300" in line and "0.600" in line and line.endswith("no")
               for line in lines)  # threshold 0.5 + offset 0.1
    assert any(line.startswith("medium") and "0.700" in line and "0.500" in line and line.endswith("yes")
               for line in lines)
    assert "tier: medium (reason: classifier" in text
    # the request's own quality knob changes the answer, and says so
    lines = explanation(router, router.classifier.proba, 0.9, False)
    assert "quality knob: 0.900 (given)" in "\n".join(lines)
    assert "tier: large" in lines[-2]


def test_thresholds_and_decide_agree():
    router = Router(FixedClassifier([0.2, 0.5, 0.3]), TIERS, quality=0.6, offsets={"medium": 0.2})
    assert router.thresholds() == {"small": 0.6, "medium": 0.8, "large": 0.0}
    assert router.decide(np.array([0.2, 0.5, 0.3])).tier == "large"  # P(medium good) 0.7 < 0.8
    assert router.decide(np.array([0.2, 0.7, 0.1])).tier == "medium"


def test_cli_explains_a_prompt_with_the_shipped_classifier(tmp_path, monkeypatch):
    from aio.cli import app

    monkeypatch.setenv("AIO_DATABASE_URL", f"sqlite:///{tmp_path / 'aio.db'}")
    result = CliRunner().invoke(app, ["router", "explain", "hi", "--quality", "0.5"])
    assert result.exit_code == 0, result.output
    assert "P(good enough)" in result.output and "tier: " in result.output
    assert "tier: large" not in result.output  # trivial chit-chat never needs the large tier
    empty = CliRunner().invoke(app, ["router", "explain", "  "])
    assert empty.exit_code == 1 and "empty" in empty.output


def test_the_nearest_seed_rows_of_a_seed_text_start_with_itself_and_sum_up_by_source():
    from aio.routing.neighbours import nearest_rows
    from classifier.seed import load_seed_data

    texts, labels, sources = load_seed_data()
    i = next(j for j, s in enumerate(sources) if s.startswith("chat:writing"))
    near, shares = nearest_rows(texts[i], k=3, pool=20)
    assert near[0].text == texts[i] and near[0].similarity > 0.99  # the shipped vectors are the encoder's, rounded
    assert (near[0].label, near[0].source) == (labels[i], sources[i])
    assert near[0].similarity >= near[1].similarity >= near[2].similarity
    assert sum(s.count for s in shares) == 20 and {s.source for s in shares} >= {sources[i]}
    from classifier.seed import seed_weight

    assert all(n.weight == seed_weight(n.source, n.label) for n in near)
    writing = next(s for s in shares if s.source == sources[i])
    assert 0 <= writing.mean_label <= 2 and writing.weight >= 0


def test_neighbour_lines_name_tier_source_and_weight():
    from aio.commands.router_explain import neighbour_lines
    from aio.routing.neighbours import Neighbour, SourceShare

    lines = neighbour_lines([Neighbour(0.8123, 2, "chat:writing", "Write a villanelle  about\nmemory " + "x" * 80, 0.0)],
                            [SourceShare("chat:writing", 7, 1.43, 20 / 7), SourceShare("routellm:mmlu", 3, 0.0, 1.0)])
    assert "0.812  large   x0    chat:writing" in lines[1] and "Write a villanelle about memory" in lines[1]
    assert lines[1].endswith("…")
    assert "among the 10 nearest" in lines[2] and "chat:writing 7 (1.4, x2.86), routellm:mmlu 3 (0.0, x1)" in lines[2]
