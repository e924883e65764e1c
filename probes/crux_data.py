"""The CRUXEval-O rows that ship with AIO: every `crux` row of the routing data's *train* file (Apache-2.0, from
ZeroEval), as compact JSON lines, so a deployment probes its tiers without the routing data. The dev file's rows
are the end-to-end benchmark's evaluation part and never ship.

    python -m probes.crux_data [--data-dir DIR]     # rebuild probes/data/crux_train.jsonl.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

from .crux import CruxRow, parse_question, read_rows

SHIPPED = Path(__file__).resolve().parent / "data" / "crux_train.jsonl.gz"


def write_shipped(rows: list[CruxRow], path: Path = SHIPPED) -> None:
    lines = [json.dumps({"id": r.id, "question": r.question, "reference_correct": list(r.reference_correct)},
                        ensure_ascii=False, separators=(",", ":")) for r in sorted(rows, key=lambda r: r.id)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same rows give the same bytes
        f.write(("\n".join(lines) + "\n").encode())


def read_shipped(path: Path = SHIPPED) -> list[CruxRow]:
    """The shipped rows, parsed as `read_rows` parses the CSV (every shipped row parses)."""
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            raw = json.loads(line)
            source, call = parse_question(raw["question"])
            rows.append(CruxRow(raw["id"], "train", raw["question"], source, call, tuple(raw["reference_correct"])))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="the routing data folder")
    args = parser.parse_args(argv)
    rows, unparsable = read_rows("train", args.data_dir or os.environ.get("AIO_ROUTING_DATA"))
    write_shipped(rows)
    print(f"wrote {len(rows)} rows to {SHIPPED} ({SHIPPED.stat().st_size} bytes); {len(unparsable)} unparsable left out")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
