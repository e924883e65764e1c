"""What benchmarks.quantization and benchmarks.quantization_serving share: the client of the llama.cpp worker
process (benchmarks/llama_cpp_worker.py) and the median over repeats."""
from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("llama_cpp_worker.py")


class LlamaCppWorker:
    def __init__(self, python: str, model: Path, threads: int, context: int = 2048) -> None:
        self.proc = subprocess.Popen([python, str(WORKER), str(model), str(threads), str(context)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        ready = self._read()
        if not ready.get("ready"):
            raise RuntimeError(f"llama.cpp worker did not start: {ready}")

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"llama.cpp worker exited (code {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **cmd: Any) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")
