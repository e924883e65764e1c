"""The heuristic router: a complexity score from the cheap signals, read through an ordinal-logistic model.

It stands in for the learned classifier behind the same interface (`version`, `predict_proba`, `predict`, `save`,
`load`), and stays as the fallback. A tier label is ordinal (0 small < 1 medium < 2 large: the cheapest tier
that answers well), so the model is the cumulative-logit one:

    score       = Σ_f weight_f · x_f              (x = feature_vector(extract_features(text)))
    P(label<=k) = sigmoid((theta_k - score) / temperature),   k = 0 .. n_tiers-2,  theta increasing
    P(label=k)  = P(label<=k) - P(label<=k-1)

The default weights (`DEFAULT_WEIGHTS`), in log1p units of each count:

    score = 1.0·log1p(words) + 1.5·log1p(reasoning keywords) + 0.4·log1p(entities)
          + 0.6·log1p(question depth) + 0.5·log1p(domain terms) + 0.8·has_code

- Length is the backbone: long prompts carry more constraints and context, and long answers cost the small
  tier most. Logs make the 10th word matter more than the 1,000th.
- Reasoning keywords weigh most per unit: "compare", "explain why", "step by step" ask for multi-step work
  even in a short prompt, which is where small models fail.
- Entities, question depth and domain terms each add a little: more things to get right, more parts to
  answer, specialist vocabulary. Code adds a flat step: code review and debugging need the larger models.
- Sentence count and `domain_specificity` get weight 0: sentences duplicate length, and the technical *share*
  would fall when a user adds words; the domain-term *count* carries that signal instead. Every weight is
  >= 0 and every weighted feature only grows when text is appended, so adding a reasoning request to a prompt
  never lowers its score, nor P(large).

The thresholds are the score quantiles of `REFERENCE_TRAFFIC` (a hand-written sample shaped like chat traffic)
at the cumulative traffic mix, 60% / 20% / 20% by default (the design's), so at a 0.5 cumulative threshold
about that share goes to each tier; `calibrate` refits them to real traffic (do it on logged
`messages_to_text` output: a constant system prompt shifts every score). The temperature (0.35 score units,
about a quarter of the distance between the two default thresholds with 3 tiers) keeps the probabilities soft
near a boundary yet lets argmax agree with the 0.5 cumulative rule except within ~0.02 of a threshold.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from classifier.features import FEATURE_NAMES, feature_matrix

CONFIG_NAME = "classifier.json"
KIND = "heuristic"
DEFAULT_TEMPERATURE = 0.35
DEFAULT_WEIGHTS: dict[str, float] = {
    "log_num_words": 1.0,
    "log_num_reasoning_keywords": 1.5,
    "log_num_entities": 0.4,
    "log_question_depth": 0.6,
    "log_num_domain_terms": 0.5,
    "has_code": 0.8,
}
_MIN_THETA_GAP = 1e-3


def default_mix(n_tiers: int) -> tuple[float, ...]:
    """The design's traffic mix: 60% small; the rest split evenly (3 tiers: 60/20/20)."""
    rest = 0.4 / (n_tiers - 1)
    return (0.6,) + (rest,) * (n_tiers - 1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free


@dataclass
class HeuristicClassifier:
    n_tiers: int = 3
    version: str = "heuristic-1"
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    temperature: float = DEFAULT_TEMPERATURE
    thetas: tuple[float, ...] | None = None  # None: calibrated on REFERENCE_TRAFFIC to default_mix(n_tiers)

    def __post_init__(self) -> None:
        if isinstance(self.n_tiers, bool) or not isinstance(self.n_tiers, int) or self.n_tiers < 2:
            raise ValueError(f"n_tiers must be an int >= 2, got {self.n_tiers!r}")
        unknown = sorted(set(self.weights) - set(FEATURE_NAMES))
        if unknown:
            raise ValueError(f"unknown feature names in weights: {unknown}; known: {list(FEATURE_NAMES)}")
        if not all(np.isfinite(w) for w in self.weights.values()):
            raise ValueError("weights must be finite")
        if not (np.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        self.weights = {name: float(w) for name, w in self.weights.items()}
        if self.thetas is None:
            self.calibrate(REFERENCE_TRAFFIC)
        else:
            self._set_thetas(self.thetas)

    # -- scoring ---------------------------------------------------------------------------------------

    @property
    def weight_vector(self) -> np.ndarray:
        return np.array([self.weights.get(name, 0.0) for name in FEATURE_NAMES], dtype=np.float64)

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """(n,) complexity scores: the weighted sum of each text's feature vector."""
        return _as_matrix(texts).astype(np.float64) @ self.weight_vector

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """(n, n_tiers) float64; row i is P(the cheapest tier that answers text i well = k)."""
        scores = self.score(texts)
        cumulative = _sigmoid((np.asarray(self.thetas)[None, :] - scores[:, None]) / self.temperature)
        n = len(scores)
        cdf = np.concatenate([np.zeros((n, 1)), cumulative, np.ones((n, 1))], axis=1)
        return np.clip(np.diff(cdf, axis=1), 0.0, 1.0)

    def predict(self, texts: Sequence[str]) -> list[int]:
        return [int(k) for k in np.argmax(self.predict_proba(texts), axis=1)]

    # -- thresholds ------------------------------------------------------------------------------------

    def calibrate(self, texts: Sequence[str], mix: Sequence[float] | None = None) -> None:
        """Sets the thresholds so that a 0.5 cumulative threshold splits `texts` by `mix` (default 60/20/...)."""
        mix = np.asarray(default_mix(self.n_tiers) if mix is None else mix, dtype=np.float64)
        if mix.shape != (self.n_tiers,) or np.any(mix < 0) or not np.isclose(mix.sum(), 1.0):
            raise ValueError(f"mix must be {self.n_tiers} non-negative shares summing to 1, got {mix.tolist()}")
        if texts is REFERENCE_TRAFFIC:
            scores = _reference_matrix().astype(np.float64) @ self.weight_vector
        else:
            scores = self.score(texts)
        if len(scores) == 0:
            raise ValueError("calibrate needs at least one text")
        self._set_thetas(np.quantile(scores, np.cumsum(mix)[:-1]))

    def _set_thetas(self, thetas: Sequence[float]) -> None:
        values = [float(t) for t in thetas]
        if len(values) != self.n_tiers - 1 or not all(np.isfinite(values)):
            raise ValueError(f"thetas must be {self.n_tiers - 1} finite numbers, got {values}")
        for k in range(1, len(values)):  # strictly increasing, or a tier could never be chosen
            values[k] = max(values[k], values[k - 1] + _MIN_THETA_GAP)
        self.thetas = tuple(values)

    # -- persistence -----------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {"kind": KIND, "version": self.version, "n_tiers": self.n_tiers, "feature_names": list(FEATURE_NAMES),
                "weights": dict(self.weights), "temperature": self.temperature, "thetas": list(self.thetas)}

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / CONFIG_NAME
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> HeuristicClassifier:
        data = json.loads((Path(folder) / CONFIG_NAME).read_text(encoding="utf-8"))
        if data.get("kind") != KIND:
            raise ValueError(f"{CONFIG_NAME} in {folder} is a {data.get('kind')!r} classifier, not {KIND!r}")
        return cls(n_tiers=int(data["n_tiers"]), version=str(data["version"]), weights=dict(data["weights"]),
                   temperature=float(data["temperature"]), thetas=tuple(data["thetas"]))


def _as_matrix(texts: Sequence[str]) -> np.ndarray:
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    return feature_matrix(texts)


@lru_cache(maxsize=1)
def _reference_matrix() -> np.ndarray:
    matrix = feature_matrix(REFERENCE_TRAFFIC)
    matrix.setflags(write=False)
    return matrix


# A sample shaped like chat traffic (about 60% simple, 20% medium, 20% hard requests): only its score
# distribution matters, through the default thresholds. Keep it stable: changing it moves every default threshold.
REFERENCE_TRAFFIC: tuple[str, ...] = (
    # simple
    "hi",
    "Hello! How are you today?",
    "thanks, that worked",
    "ok, shorter please",
    "What is the capital of Australia?",
    "How many ounces are in a pound?",
    "Translate 'good morning' into Spanish.",
    "What's the weather usually like in Lisbon in May?",
    "Give me a synonym for happy.",
    "Who wrote Pride and Prejudice?",
    "Convert 72 Fahrenheit to Celsius.",
    "What time zone is Tokyo in?",
    "Tell me a short joke about cats.",
    "Fix the spelling: 'I recieved the pakage yesterday.'",
    "What does HTML stand for?",
    "Is a tomato a fruit or a vegetable?",
    "Write a one-line birthday message for my sister.",
    "How do I boil an egg?",
    "What year did the Berlin Wall fall?",
    "Summarize in one sentence: the meeting moved to Thursday at 3pm because the room was booked.",
    "Suggest a name for a golden retriever puppy.",
    "What is 15% of 80?",
    "Define photosynthesis in simple terms.",
    "can you make this sound more polite: send me the report now",
    "How do you say thank you in Japanese?",
    "What's a good side dish for grilled salmon?",
    "list 5 fruits that are high in vitamin C",
    "How long should I steep green tea?",
    "What is the plural of cactus?",
    "Recommend a classic science fiction novel.",
    # medium
    "Write a Python function that checks whether a string is a palindrome, ignoring spaces and punctuation.",
    "Explain how HTTPS keeps data private between my browser and a website.",
    "Draft a polite email to my landlord asking him to fix the heating, which has been broken for a week.",
    "What are the main differences between a Roth IRA and a traditional IRA?",
    "Write a SQL query that returns the ten customers with the highest total order value in 2023.",
    "Summarize the causes of the French Revolution in a short paragraph for a high-school student.",
    "My React component re-renders on every keystroke. What are the common reasons and how do I fix them?",
    "Create a 3-day itinerary for Rome with museums, food and a day trip, on a mid-range budget.",
    "What is the difference between a virus and a bacterium, and why do antibiotics only work on one of them?",
    "Rewrite this to be clearer and more concise: Our team has been working on the new onboarding flow for a "
    "while now and we think that it is going to make things a lot better for users who sign up for the first time.",
    # hard
    "We run a Django monolith with 40 engineers. Compare moving to microservices with modularizing the "
    "monolith: evaluate the trade-offs in deployment, data consistency and team autonomy, explain why you would "
    "pick one, and give a step by step migration plan with risks for each phase.",
    "Please review this code for bugs, performance and style, and suggest a cleaner version:\n```python\n"
    "def load_users(path):\n    users = []\n    f = open(path)\n    for line in f.readlines():\n"
    "        parts = line.split(',')\n        if len(parts) == 3:\n"
    "            users.append({'name': parts[0], 'age': int(parts[1]), 'email': parts[2]})\n"
    "    for u in users:\n        for v in users:\n            if u['email'] == v['email'] and u is not v:\n"
    "                print('duplicate', u)\n    return users\n```",
    "Prove that the square root of 2 is irrational, then explain why the same argument fails for the square root "
    "of 4 and how it generalizes to the square root of any non-square integer.",
    "Analyze whether a 2-year non-compete clause in an employment contract is enforceable in California versus "
    "Texas, and discuss the implications for a software engineer who wants to join a competitor.",
    "What would happen if the Federal Reserve raised interest rates by 2% tomorrow? Analyze the likely effects "
    "on mortgages, stocks and the dollar, and compare them with what happened in the early 1980s.",
    "I get this error when I start the app and I don't understand why:\n```\nTraceback (most recent call last):\n"
    "  File \"app.py\", line 12, in <module>\n    from utils.db import get_session\n"
    "ImportError: cannot import name 'get_session' from partially initialized module 'utils.db'\n```\n"
    "Both utils/db.py and models.py import each other. How should I restructure the modules?",
    "Design a rate limiter for an API gateway that handles 50k requests per second across 3 regions. Discuss "
    "token bucket versus sliding window, their trade-offs, and how you would keep counters consistent across "
    "regions without adding much latency.",
    "Synthesize the findings of recent studies on intermittent fasting and weight loss: assess the quality of "
    "the evidence, compare it with ordinary calorie restriction, and say which questions are still open.",
    "Derive the gradient of the softmax cross-entropy loss with respect to the logits step by step, and explain "
    "why it simplifies to p - y.",
    "Our startup has $2M ARR growing 8% a month with 70% gross margins. Build a simple DCF valuation, state your "
    "assumptions for the discount rate and terminal growth, and evaluate how sensitive the result is to each.",
)
