"""On a machine with a GPU the test process runs Triton compiled, so the Triton tests' CPU cases (marked
triton_interpreter) are skipped in it; this test runs them in a second pytest process with the GPU hidden, where
tests/conftest.py turns the interpreter on before triton is imported. Without a GPU they ran in the process itself."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import triton_interpreted

TESTS = Path(__file__).parent


@pytest.mark.gpu
def test_triton_cpu_cases_pass_in_the_interpreter():
    if triton_interpreted():
        pytest.skip("this process runs Triton in the interpreter: the CPU cases ran in it")
    files = sorted(str(p.relative_to(TESTS.parent)) for p in TESTS.glob("test_*.py")  # the marker, or conftest's
                   if p.name != Path(__file__).name and re.search(r"triton_interpreter|TRITON_DEVICES", p.read_text()))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "triton_interpreter",
                           *files], cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.strip().splitlines()[-1], done.stdout[-2000:]
