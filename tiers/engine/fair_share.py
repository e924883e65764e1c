"""Fair sharing between tenants: no tenant keeps the batch to itself while another waits.

A tenant is an opaque id a caller attaches to its sequences (an API key's id); the engine never interprets it.
Its holding is what its running sequences hold of the engine's two resources: seats (of `max_num_seqs`) and KV
blocks (a prefix block its sequences share counts for each). Its dominant share is the larger of the two
fractions (Dominant Resource Fairness), and its fair share is 1 / the number of tenants with sequences waiting or
running: a tenant that has finished stops counting, so the shares move only as tenants come and go.

- Waiting sequences of one priority are admitted in the order of their tenants' dominant shares, then of their
  tenants' sequences in the engine (waiting or running), then of arrival: the tenant holding least goes first.
- A waiting sequence whose tenant holds less than its fair share, and that finds no seat or no blocks, displaces
  the latest running sequences of the tenant most above its share (same or lower priority; recomputed later, as a
  preemption), but only as many as it needs and only if, afterwards, that tenant still holds at least as much as
  the waiting one will: displacing never swaps two tenants' places, so a displaced sequence cannot displace back
  and the sequences settle instead of thrashing. When that cannot be done, nothing is displaced: the sequence
  waits, first in line, for what frees up.
- A running sequence that needs a block the pool does not have takes it from the latest sequence of the tenant
  most above its share among the lowest-priority ones (its own tenant's if that is the one), else from the
  latest lowest-priority sequence as before.

Priorities come first (the quality monitor's replays, at 10, stay behind live traffic); sequences without a tenant
are never displaced for fairness and never displace anyone (without tenants the scheduler is plain FCFS).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence as Seq

from tiers.engine.sequence import Sequence

Tenant = Hashable


@dataclass
class Holding:
    seats: int = 0
    blocks: int = 0


class FairShare:
    """Who holds what at one moment of a step: a snapshot taken each time the scheduler must choose."""

    def __init__(self, running: Seq[Sequence], waiting: Seq[Sequence], max_num_seqs: int, num_blocks: int) -> None:
        self.max_num_seqs, self.num_blocks = max_num_seqs, num_blocks
        self.held: dict[Tenant, Holding] = {}
        for seq in running:
            if seq.tenant is not None:
                holding = self.held.setdefault(seq.tenant, Holding())
                holding.seats += 1
                holding.blocks += len(seq.blocks)
        self.num_seqs = Counter(seq.tenant for seq in (*running, *waiting) if seq.tenant is not None)
        self.share = 1 / len(self.num_seqs) if self.num_seqs else 1.0

    def admission_rank(self, seq: Sequence) -> tuple[float, int]:
        """Lower is admitted first (within a priority, before arrival order)."""
        return self.dominant(seq.tenant), self.num_seqs.get(seq.tenant, 0)

    def dominant(self, tenant: Tenant | None, extra: Holding | None = None) -> float:
        """The tenant's dominant share, with `extra` added to its holding (0 for no tenant)."""
        if tenant is None:
            return 0.0
        held, extra = self.held.get(tenant, Holding()), extra or Holding()
        return max((held.seats + extra.seats) / self.max_num_seqs, (held.blocks + extra.blocks) / self.num_blocks)

    def most_over_share(self, candidates: Iterable[Sequence]) -> Tenant | None:
        """Among the candidates' tenants, the one with the largest dominant share above its fair share."""
        over = {seq.tenant for seq in candidates if seq.tenant is not None and self.dominant(seq.tenant) > self.share}
        return max(over, key=self.dominant, default=None)

    def displace(self, seq: Sequence, running: list[Sequence], seats_short: int, blocks_short: int,
                 need: Holding) -> list[Sequence]:
        """The running sequences `seq` (waiting, `need` to be admitted) may displace to find `seats_short` seats
        and `blocks_short` blocks; [] when its tenant is not under its share or no fair choice covers the need.
        `running` is in rank order (best first)."""
        if seq.tenant is None or self.dominant(seq.tenant) >= self.share:
            return []
        after = self.dominant(seq.tenant, need)
        victims: list[Sequence] = []
        while seats_short > 0 or blocks_short > 0:
            candidates = [s for s in running if s.tenant != seq.tenant and s.priority >= seq.priority
                          and s not in victims]
            tenant = self.most_over_share(candidates)
            if tenant is None:
                return []
            victim = next(s for s in reversed(candidates) if s.tenant == tenant)
            freed = Holding(1, sum(1 for b in victim.blocks if b.ref_count == 1))
            if self.dominant(tenant, Holding(-freed.seats, -len(victim.blocks))) < after:
                return []  # it would end up holding less than the waiting tenant: the two would swap places
            held = self.held[tenant]
            held.seats, held.blocks = held.seats - 1, held.blocks - len(victim.blocks)
            seats_short, blocks_short = seats_short - freed.seats, blocks_short - freed.blocks
            victims.append(victim)
        return victims

    def victim(self, running: list[Sequence]) -> Sequence:
        """Whom a running sequence short of a block preempts: among the lowest-priority running sequences, the
        latest of the tenant most above its share, else the latest. `running` is in rank order (best first)."""
        lowest = running[-1].priority
        tenant = self.most_over_share(s for s in running if s.priority == lowest)
        if tenant is None:
            return running[-1]
        return next(s for s in reversed(running) if s.tenant == tenant and s.priority == lowest)
