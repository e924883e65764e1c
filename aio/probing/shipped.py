"""Measurements that ship with AIO (`aio/data/measurements.jsonl.gz`: the family demo's tiers), so that
`make run-family` routes well from the first request. A shipped measurement is used only by a tier whose
fingerprint (the SHA-256 of its model file, with the settings that change answers) is the one it was made with.

    python -m aio.probing.shipped --database-url URL TIER=FINGERPRINT ...   # write it from a measured database
"""
from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import asdict
from pathlib import Path

from aio.probing.store import MEASURED, ProbeOutcome, ProbeStore

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "measurements.jsonl.gz"


def import_shipped(store: ProbeStore, fingerprints: dict[str, str], path: Path = SHIPPED) -> list[str]:
    """Imports the shipped measurement of every tier whose fingerprint matches and that is not measured yet;
    returns those tiers."""
    if not path.is_file():
        return []
    wanted = {fp: tier for tier, fp in fingerprints.items()
              if not ((s := store.status(fp)) is not None and s.measured)}
    runs: dict[str, dict] = {}
    results: dict[str, list[dict]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("fingerprint") not in wanted:
                continue
            if row.pop("kind") == "run":
                runs[row["fingerprint"]] = row
            else:
                results.setdefault(row["fingerprint"], []).append(row)
    imported = []
    for fingerprint, run in runs.items():
        tier = wanted[fingerprint]
        store.begin(fingerprint, tier, run["model"], run["probe_set"], run["planned"], source="shipped")
        for row in results.get(fingerprint, []):
            store.add(ProbeOutcome(**{**row, "tier": tier}))
        store.finish(fingerprint, MEASURED, note="shipped with AIO")
        imported.append(tier)
    return imported


def export(store: ProbeStore, fingerprints: dict[str, str], path: Path = SHIPPED) -> int:
    lines = []
    for tier, fingerprint in fingerprints.items():
        status = store.status(fingerprint)
        if status is None or not status.measured:
            raise ValueError(f"tier {tier} ({fingerprint}) is not measured")
        lines.append({"kind": "run", "fingerprint": fingerprint, "tier": tier, "model": status.model,
                      "probe_set": status.probe_set, "planned": status.planned})
        lines += [{"kind": "result", **asdict(r)} for r in store.results(fingerprint)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(("\n".join(json.dumps(line, separators=(",", ":")) for line in lines) + "\n").encode())
    return len(lines)


def main(argv: list[str] | None = None) -> int:
    from aio.db.database import make_engine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("tiers", nargs="+", metavar="TIER=FINGERPRINT")
    args = parser.parse_args(argv)
    fingerprints = dict(item.split("=", 1) for item in args.tiers)
    n = export(ProbeStore(make_engine(args.database_url)), fingerprints)
    print(f"wrote {n} lines to {SHIPPED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
