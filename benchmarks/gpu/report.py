"""The GPU benchmark's results: rows printed as they are measured, one table at the end, and a JSON file
rewritten after every part (a run killed mid-way leaves what it had measured)."""
from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass
class Row:
    part: str
    model: str
    system: str
    metric: str  # e.g. "decode tok/s", "throughput tok/s", "load s", "copy GB/s", "greedy tokens equal"
    value: float | None = None
    unit: str = ""
    hbm: float | None = None  # bytes read per second / the copy bandwidth measured in the same run
    note: str = ""
    error: str | None = None  # the row ran and failed: why
    skipped: str | None = None  # the row did not run: why

    def line(self) -> str:
        if self.error or self.skipped:
            shown = f"{'FAILED: ' + self.error if self.error else 'skipped: ' + str(self.skipped)}"
            return f"{self.part:<12} {self.model:<14} {self.system:<34} {self.metric:<20} {shown}"
        v = self.value
        value = "-" if v is None else f"{v:,.0f}" if abs(v) >= 1000 or float(v).is_integer() else f"{v:,.2f}"
        hbm = f"{self.hbm:.1%}" if self.hbm is not None else ""
        return (f"{self.part:<12} {self.model:<14} {self.system:<34} {self.metric:<20} {value:>10} {self.unit:<6} "
                f"{hbm:>6}  {self.note}").rstrip()


HEADER = (f"{'part':<12} {'model':<14} {'system':<34} {'metric':<20} {'value':>10} {'unit':<6} {'HBM':>6}  note\n"
          + "-" * 120)


def environment(device: str) -> dict[str, Any]:
    """Versions and the device, for the table's header and the JSON."""
    import transformers

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    env: dict[str, Any] = {"device": "cpu", "torch": torch.__version__, "cuda": torch.version.cuda,
                           "triton": triton_version, "transformers": transformers.__version__,
                           "python": platform.python_version(), "cpu_count": os.cpu_count(),
                           "float32_matmul_precision": torch.get_float32_matmul_precision()}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        env.update(device=props.name, device_memory_gb=round(props.total_memory / 1e9, 1),
                   device_count=torch.cuda.device_count())
    return env


class Report:
    def __init__(self, path: Path, env: dict[str, Any], settings: dict[str, Any]) -> None:
        self.path, self.env, self.settings = path, env, settings
        self.rows: list[Row] = []
        self.parts: dict[str, dict[str, Any]] = {}
        self.copy_gb_s: float | None = None  # device-to-device copy, read + write
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.details: dict[str, Any] = {}  # per part: what a row cannot hold (correctness per prompt, KV usage)
        print(self.header(), flush=True)
        print(HEADER, flush=True)

    def header(self) -> str:
        e = self.env
        copy = f"{self.copy_gb_s:,.0f} GB/s" if self.copy_gb_s else "not measured"
        return (f"device {e['device']}, torch {e['torch']}, CUDA {e['cuda']}, Triton {e['triton']}, transformers "
                f"{e['transformers']}; device-to-device copy bandwidth {copy}")

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        print(row.line(), flush=True)
        return row

    def end_part(self, name: str, status: str, seconds: float, reason: str | None = None) -> None:
        self.parts[name] = {"status": status, "seconds": round(seconds, 1), **({"reason": reason} if reason else {})}
        print(f"== part {name}: {status} in {seconds:.1f} s" + (f" ({reason})" if reason else ""), flush=True)
        self.write()

    def as_dict(self) -> dict[str, Any]:
        return {"env": self.env, "settings": self.settings,
                "copy": {"gb_s": self.copy_gb_s}, "parts": self.parts, "checkpoints": self.checkpoints,
                "rows": [asdict(r) for r in self.rows], "details": self.details}

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.as_dict(), indent=2, default=str) + "\n")
        tmp.replace(self.path)

    def table(self) -> str:
        return "\n".join([self.header(), HEADER] + [r.line() for r in self.rows])
