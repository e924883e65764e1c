"""Probing the tiers a deployment serves: the built-in probe set (`probes`) answered by every tier, scored against
its computed truth and stored as labelled rows, so routing is fitted to these tiers' outcomes (`aio calibrate`,
and `aio serve` in the background for a tier whose model was never measured)."""
