"""Adaptive k: how many draft tokens each decoding sequence gets this step (0: plain decoding).

Leviathan et al.: with per-token acceptance alpha, k draft tokens yield E = (1 - alpha^(k+1)) / (1 - alpha)
tokens per verification. Instead of their constant cost ratio we use measured costs, since verification is not
free off a memory-bound GPU (on a CPU, k + 1 tokens per sequence multiply the target's matmul work): the step's
time is T_target(tokens in the step) + k * T_draft(decoding sequences), both learned online. The k in 0..K with
the most emitted tokens per second wins, so speculation switches itself off when acceptance is low or the batch is
large enough that verification stops paying, and comes back when that changes. Acceptance is tracked per request
in decaying counts. A new request starts from the engine-wide rate of recent verifications plus OPTIMISM
pseudo-trials that were all accepted, which its own verifications soon outweigh: judged on the last request's
rate alone, a new one would be denied the very verifications that measure its own (after a haiku the draft
guessed badly, the next answer, code it guesses well, ran without speculation to its end). A request below
MIN_ALPHA sits out and drifts back toward the engine-wide rate, so it is tried again later. A request that decoded
RETRY_AFTER steps in a row without draft tokens is judged afresh, as a new one, and waits twice as long before its
next fresh start: an answer whose prose the draft guessed badly gets speculation back for the code that follows,
and one that stays bad pays a few verifications at ever longer intervals.

Confidence stop (with a draft model): once k > 0 wins, a request may draft up to K tokens, and after each draft
forward it drafts one more only while that pays. The draft's own probability of its token (its confidence; the
family's 0.5B drafting for the 1.5B, greedy: 99% of its tokens above 0.9 were accepted, 37% of those below 0.4)
estimates the chance that the tokens drafted so far are all accepted, P = prod(confidence). Stopping now, the step
emits E = 1 + sum of the P after each token, in C = rounds * T_draft + T_target(step tokens); one more token adds
P * alpha tokens for T_draft + T_target(step tokens + 1) - T_target(step tokens). It is drafted if that is the
better rate: P * alpha * C > E * (its cost). So a fixed per-request k gives way to a per-token decision: long
drafts where the draft is sure, one token where it is not. Probes (a k chosen to time a step size) draft their k.
A confidence is a probability only where the draft is calibrated: the rule reads each through the acceptance
measured at confidences like it (ConfidenceCalibration), so a draft that agrees with its target while its
distribution is flat (the random pair's one-layer draft: confidences near 0, 88-92% accepted) keeps drafting.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from tiers.engine.sequence import Sequence

DECAY = 0.9  # per verification, for the per-request acceptance counts
GLOBAL_DECAY = 0.98  # per verification, for the engine-wide counts: the last few requests, not the last one
PRIOR_WEIGHT = 2.0  # pseudo-trials of the engine-wide rate that start a request's estimate
OPTIMISM = 2.0  # accepted pseudo-trials added to a new request's start (see the module docstring)
RETRY_AFTER = 16  # steps without draft tokens after which a request is judged afresh (doubled at each fresh start)
MIN_ALPHA = 0.15
EXPLORE_EVERY = 32  # steps: re-measure a step size (k = 0 included) the cost model has not seen lately
STALE_AFTER = 4 * EXPLORE_EVERY  # steps after which a measurement counts as old, doubled (up to MAX_STALE_AFTER)
MAX_STALE_AFTER = 64 * EXPLORE_EVERY  # each time a re-measurement leaves k = 0 the best: each probe of k > 0
# makes the draft catch up on every token it skipped, which costs more than the probe's own step
CALIBRATION_BINS = 10
CALIBRATION_PRIOR = 4.0  # pseudo-trials per bin at the confidence's own value
CALIBRATION_DECAY = 0.995  # per verified token in a bin: the last few hundred count
PROBE_BUDGET = 0.1  # a probe of k > 0 waits while the draft's catch-up would cost more than this share of
# EXPLORE_EVERY plain steps (batch 8 after a while at k = 0: ~600 tokens, 2 s of a 0.5B draft on 2 CPU threads)


@dataclass
class AcceptanceEstimate:
    accepted: float
    trials: float
    decay: float = DECAY
    idle_steps: int = 0  # decoding steps in a row without draft tokens
    retry_after: int = RETRY_AFTER  # idle steps before a fresh start

    @property
    def alpha(self) -> float:
        return self.accepted / self.trials if self.trials else 0.0

    def update(self, num_draft: int, num_accepted: int) -> None:
        """A verification of num_draft tokens accepted num_accepted: that many successes, and one failure unless
        all were accepted (the trials stop at the first rejection)."""
        self.accepted = self.decay * self.accepted + num_accepted
        self.trials = self.decay * self.trials + num_accepted + (num_accepted < num_draft)

    def relax(self, alpha: float, rate: float = 0.05) -> None:
        """Drift toward `alpha` while the request is not speculating."""
        target = alpha * self.trials
        self.accepted += rate * (target - self.accepted)


class ConfidenceCalibration:
    """The chance that a draft token is accepted (its predecessors accepted) given the draft's confidence in it:
    decaying counts of verified tokens in CALIBRATION_BINS equal bins of confidence, each bin starting from
    CALIBRATION_PRIOR pseudo-trials that take the confidence at its word."""

    def __init__(self) -> None:
        self.accepted = [0.0] * CALIBRATION_BINS
        self.trials = [0.0] * CALIBRATION_BINS

    @staticmethod
    def _bin(confidence: float) -> int:
        if not confidence > 0:  # NaN too: a draft whose logits went NaN has no confidence in its token
            return 0
        return min(CALIBRATION_BINS - 1, int(confidence * CALIBRATION_BINS))

    def update(self, confidences: list[float], num_accepted: int) -> None:
        """A verification of drafts with these confidences accepted the first num_accepted: those succeeded, the
        next one failed, the rest were not judged."""
        for j, confidence in enumerate(confidences[:num_accepted + 1]):
            b = self._bin(confidence)
            self.accepted[b] = CALIBRATION_DECAY * self.accepted[b] + (j < num_accepted)
            self.trials[b] = CALIBRATION_DECAY * self.trials[b] + 1

    def probability(self, confidence: float) -> float:
        confidence = confidence if confidence > 0 else 0.0  # NaN: none
        b = self._bin(confidence)
        return (self.accepted[b] + CALIBRATION_PRIOR * confidence) / (self.trials[b] + CALIBRATION_PRIOR)


class CostModel:
    """Seconds of a forward pass as a function of its token count: decaying means per power-of-two bucket of the
    count, interpolated linearly between buckets. A bucket's first 1 / (1 - decay) observations weigh alike, so
    a cold first forward does not linger in a bucket that is seldom re-measured (k = 0's while speculation runs);
    and a forward is never estimated to cost more than a larger one measured."""

    def __init__(self, decay: float = 0.8) -> None:
        self.decay = decay
        self.buckets: dict[int, list[float]] = {}  # bucket -> [mean tokens, mean seconds, step last seen, count]

    def observe(self, num_tokens: int, seconds: float, step: int = 0) -> None:
        b = num_tokens.bit_length()
        entry = self.buckets.get(b)
        if entry is None:
            self.buckets[b] = [float(num_tokens), seconds, step, 1]
            return
        entry[3] += 1
        w = max(1 - self.decay, 1 / entry[3])
        entry[0] += w * (num_tokens - entry[0])
        entry[1] += w * (seconds - entry[1])
        entry[2] = step

    def has_bucket(self, num_tokens: int) -> bool:
        return num_tokens.bit_length() in self.buckets

    def knows(self, num_tokens: int, step: int, max_age: int) -> bool:
        entry = self.buckets.get(num_tokens.bit_length())
        return entry is not None and step - entry[2] <= max_age

    def estimate(self, num_tokens: int) -> float | None:
        if not self.buckets:
            return None
        points = sorted((n, t) for n, t, _, _ in self.buckets.values())
        for i in range(len(points) - 2, -1, -1):
            points[i] = (points[i][0], min(points[i][1], points[i + 1][1]))
        lower = [p for p in points if p[0] <= num_tokens]
        upper = [p for p in points if p[0] > num_tokens]
        if lower and upper:
            (n0, t0), (n1, t1) = lower[-1], upper[0]
            return t0 + (t1 - t0) * (num_tokens - n0) / (n1 - n0)
        if upper:  # below every measurement: at most the smallest one's time
            return upper[0][1]
        if len(lower) >= 2:  # above: extend the last segment's slope
            (n0, t0), (n1, t1) = lower[-2], lower[-1]
            return t1 + max(0.0, (t1 - t0) / (n1 - n0)) * (num_tokens - n1)
        return lower[-1][1]


class SpecController:
    def __init__(self, max_k: int, adaptive: bool = True, draft_has_cost: bool = True, prior_alpha: float = 0.7,
                 confidence_stop: bool = True) -> None:
        """confidence_stop: the per-token stop of the module docstring (adaptive, with a draft model only)."""
        self.max_k, self.adaptive, self.draft_has_cost = max_k, adaptive, draft_has_cost
        self.confidence_stop = confidence_stop and adaptive and draft_has_cost
        self.stopping = False  # this step's drafts stop on confidence (not a probe)
        self.target_cost = CostModel()
        self.draft_cost = CostModel()
        self.global_alpha = AcceptanceEstimate(prior_alpha * 8, 8.0, GLOBAL_DECAY)
        self.calibration = ConfidenceCalibration()
        self.num_steps = 0
        self.last_k = max_k
        self.stale_after = STALE_AFTER
        self.probed = False  # a k > 0 was tried to re-measure since the last decision

    def acceptance(self, seq: Sequence) -> AcceptanceEstimate:
        if seq.spec_acceptance is None:
            seq.spec_acceptance = self._fresh_estimate()
        return seq.spec_acceptance

    def _fresh_estimate(self, retry_after: int = RETRY_AFTER) -> AcceptanceEstimate:
        """A new request's estimate: the engine-wide rate plus OPTIMISM accepted pseudo-trials."""
        alpha = self.global_alpha.alpha
        return AcceptanceEstimate(alpha * PRIOR_WEIGHT + OPTIMISM, PRIOR_WEIGHT + OPTIMISM, retry_after=retry_after)

    def _count_idle(self, seq: Sequence) -> None:
        """After a step's plan: a request without draft tokens RETRY_AFTER steps in a row (doubled at each fresh
        start) starts afresh (see the module docstring)."""
        est = self.acceptance(seq)
        if seq.num_lookahead_tokens:
            est.idle_steps = 0
            return
        est.idle_steps += 1
        if est.idle_steps >= est.retry_after:
            seq.spec_acceptance = self._fresh_estimate(2 * est.retry_after)

    def record(self, seq: Sequence, num_draft: int, num_accepted: int, confidences: list[float] | None = None
               ) -> None:
        """A verification's outcome; confidences: the draft's in its num_draft tokens (a draft model's), if any."""
        if num_draft:
            self.acceptance(seq).update(num_draft, num_accepted)
            self.global_alpha.update(num_draft, num_accepted)
        if confidences is not None and len(confidences) == num_draft:
            self.calibration.update(confidences, num_accepted)

    def plan(self, running: list[Sequence], max_model_len: int, num_other_tokens: int) -> int:
        """Sets num_lookahead_tokens on every running sequence; returns the step's k. num_other_tokens: the
        prefill tokens expected in the step besides the decodes."""
        self.num_steps += 1
        decoding: list[tuple[Sequence, int, float]] = []
        for seq in running:
            seq.num_lookahead_tokens = 0
            if seq.num_tokens - seq.num_computed_tokens != 1 or seq.processes_logits:
                continue  # not decoding, or penalties/logit_bias/min_tokens/a grammar: no speculation (exact)
            # Never propose past max_tokens or max_model_len: the step emits up to k + 1 tokens.
            room = min(seq.params.max_tokens - seq.num_output_tokens, max_model_len - seq.num_tokens) - 1
            est = self.acceptance(seq)
            if room <= 0:
                continue
            if self.adaptive and est.alpha < MIN_ALPHA:
                est.relax(self.global_alpha.alpha)
                continue
            decoding.append((seq, room, est.alpha))
        self.stopping = False
        if not decoding:
            return 0
        k, probe = self._choose_k(decoding, num_other_tokens) if self.adaptive else (self.max_k, False)
        self.last_k = k
        if k and self.confidence_stop and not probe:
            k, self.stopping = self.max_k, True
        for seq, room, _ in decoding:
            seq.num_lookahead_tokens = min(k, room)
            if self.adaptive:
                self._count_idle(seq)
        return k

    def keep_drafting(self, drafts: list[tuple[Sequence, list[float]]], step_tokens: int) -> list[bool]:
        """After a draft forward, which of `drafts` (the requests still drafting, with their draft tokens'
        confidences so far) draft one more token: the rule of the module docstring, exact at batch 1; a batch shares
        the draft forward (T_draft(n) / n each) and sums E. step_tokens: the target step's tokens if all stopped now.
        All of them when this step does not stop on confidence, or a cost is not measured yet."""
        if not self.stopping:
            return [True] * len(drafts)
        n = len(drafts)
        draft, now = self.draft_cost.estimate(n), self.target_cost.estimate(step_tokens)
        more = self.target_cost.estimate(step_tokens + 1)
        if draft is None or now is None or more is None:
            return [True] * n
        rounds = len(drafts[0][1])
        chances = [[self.calibration.probability(c) for c in confidences] for _, confidences in drafts]
        emitted = sum(expected_emitted(p) for p in chances)
        spent, extra = rounds * draft + now, draft / n + max(0.0, more - now)
        return [prod(p) * self.acceptance(seq).alpha * spent > emitted * extra
                for (seq, _), p in zip(drafts, chances)]

    def _choose_k(self, decoding: list[tuple[Sequence, int, float]], num_other: int) -> tuple[int, bool]:
        """The k with the most expected tokens per second, and whether it was chosen to time a step size (a
        probe)."""
        candidates = []  # (k, emitted tokens expected, tokens in the step)
        for k in range(self.max_k + 1):
            emitted, tokens = 0.0, num_other
            for _, room, alpha in decoding:
                kk = min(k, room)
                emitted += expected_tokens(alpha, kk)
                tokens += 1 + kk
            candidates.append((k, emitted, tokens))
        # Measure every step size a k would give once (a forward's cost is not smooth in its token count: BLAS
        # kernels change at row counts), then re-measure stale ones now and then, or a k decided on old figures
        # (k = 0 above all) would stick.
        phase = self.num_steps % EXPLORE_EVERY
        for k, _, tokens in candidates:
            if not self.target_cost.has_bucket(tokens):
                return k, True
        if phase == 0:
            for k, _, tokens in candidates:
                if (not self.target_cost.knows(tokens, self.num_steps, self.stale_after)
                        and (k == 0 or self._catch_up_affordable(decoding, candidates[0][2]))):
                    self.probed = self.probed or k > 0
                    return k, True
        if (phase == EXPLORE_EVERY // 2 and self.draft_has_cost
                and not self.draft_cost.knows(len(decoding), self.num_steps, self.stale_after)
                and self._catch_up_affordable(decoding, candidates[0][2])):
            self.probed = True
            return min(2, self.max_k), True  # and the draft's cost
        best_k, best_rate = 0, 0.0
        for k, emitted, tokens in candidates:
            seconds = self.target_cost.estimate(tokens)
            if seconds is None:
                return self.max_k, True  # nothing measured yet: try speculating
            if k and self.draft_has_cost:
                draft = self.draft_cost.estimate(len(decoding))
                if draft is None:
                    return self.max_k, True
                seconds += k * draft
            rate = emitted / max(seconds, 1e-9)
            if rate > best_rate * 1.02 or k == 0:  # a longer k must pay clearly
                best_k, best_rate = k, rate
        self._back_off(best_k)
        return best_k, False

    def _catch_up_affordable(self, decoding: list[tuple[Sequence, int, float]], plain_tokens: int) -> bool:
        """Whether a probe of k > 0 is worth its draft catch-up (every token the draft skipped while k was 0): at
        most PROBE_BUDGET of EXPLORE_EVERY plain steps, by the measured costs (unknown costs: yes)."""
        if not self.draft_has_cost:
            return True
        behind = sum(max(0, seq.num_tokens - 1 - seq.num_draft_computed_tokens) for seq, _, _ in decoding)
        catch_up, plain = self.draft_cost.estimate(behind), self.target_cost.estimate(plain_tokens)
        return behind == 0 or catch_up is None or plain is None or catch_up <= PROBE_BUDGET * EXPLORE_EVERY * plain

    def _back_off(self, best_k: int) -> None:
        """Re-measure less often while re-measurements keep confirming that speculation does not pay."""
        if best_k:
            self.stale_after = STALE_AFTER
        elif self.probed:
            self.stale_after = min(2 * self.stale_after, MAX_STALE_AFTER)
        self.probed = False

    def observe_target(self, num_tokens: int, seconds: float) -> None:
        self.target_cost.observe(num_tokens, seconds, self.num_steps)

    def observe_draft(self, num_tokens: int, seconds: float) -> None:
        self.draft_cost.observe(num_tokens, seconds, self.num_steps)

    def cost_ratio(self) -> float | None:
        """Leviathan's c: a draft forward's time over a target forward's, both for one token."""
        t, d = self.target_cost.estimate(1), self.draft_cost.estimate(1)
        if not self.draft_has_cost:
            return 0.0
        return None if t is None or d is None else d / t


def expected_emitted(confidences: list[float]) -> float:
    """Tokens a verification emits on average when each draft token is accepted with its draft's confidence: 1 +
    the chance that the first j are all accepted, summed over j."""
    emitted, all_accepted = 1.0, 1.0
    for confidence in confidences:
        all_accepted *= confidence
        emitted += all_accepted
    return emitted


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens a verification of k draft tokens emits on average (accepted + the recovered/bonus token)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)
