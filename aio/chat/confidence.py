"""How sure a tier was of its answer, from the logprobs of the tokens it chose: what the confidence cascade judges.

The logprobs are the model's raw distribution (before temperature, penalties and logit_bias), so the score does not
move with the client's sampling parameters.
"""
from __future__ import annotations

import math
from typing import Literal, Sequence

Measure = Literal["mean", "min"]
MEASURES: tuple[Measure, ...] = ("mean", "min")
LOGPROB_FLOOR = -100.0  # a chosen token the model gave (almost) no probability; keeps scores finite (JSON, SQL)


def confidence(logprobs: Sequence[float], measure: Measure = "mean") -> float | None:
    """The confidence of an answer whose chosen tokens had these logprobs, by `measure`:

    - "mean": their mean, the log of the tokens' geometric-mean probability (-0.5: about 0.61 per token). Length
      does not move it, and one unsure token in a long answer barely does.
    - "min": the least likely token's logprob: one doubtful token is enough to doubt the answer. Its scale is not
      the mean's (a long answer's minimum is far lower), so it needs its own threshold.

    None when there are no logprobs (a remote tier does not return them, an empty answer): the confidence is
    unknown, and an answer of unknown confidence is never cascaded."""
    if not logprobs:
        return None
    values = [lp if lp >= LOGPROB_FLOOR else LOGPROB_FLOOR for lp in logprobs]  # -inf and NaN to the floor
    if measure == "mean":
        return math.fsum(values) / len(values)
    if measure == "min":
        return min(values)
    raise ValueError(f"unknown confidence measure {measure!r}; measures: {', '.join(MEASURES)}")
