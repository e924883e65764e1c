"""benchmarks.w4a16_sass compiles the W4A16 kernels (tl.dot and GEMV) for sm_90 without a GPU and reads their
cubins."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


@pytest.mark.skipif(not CUOBJDUMP.exists(), reason="this Triton ships no cuobjdump")
def test_reports_registers_spills_and_the_mma_of_each_config():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the interpreter compiles nothing
    configs = ["16,64,128,4,3", "64,64,64,4,3"]
    done = subprocess.run([sys.executable, "-m", "benchmarks.w4a16_sass", "--configs", *configs], env=env,
                          capture_output=True, text=True, check=False, timeout=600, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert [line.split()[0] for line in lines] == configs
    for line in lines:
        registers = int(re.search(r"REG:(\d+)", line).group(1))
        assert 0 < registers <= 255
        assert re.search(r"\d+ HGMMA", line), line  # tl.dot on sm_90 runs Hopper's warpgroup MMA


@pytest.mark.skipif(not CUOBJDUMP.exists(), reason="this Triton ships no cuobjdump")
def test_reports_the_gemv_with_its_barriers_both_ways_of_loading_the_activations():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    configs = ["1,16,1024,4,0", "1,16,1024,4,1"]
    done = subprocess.run([sys.executable, "-m", "benchmarks.w4a16_sass", "--configs", "--gemv", *configs], env=env,
                          capture_output=True, text=True, check=False, timeout=600, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert [line.split()[:2] for line in lines] == [["gemv", c] for c in configs]
    for line in lines:
        assert 0 < int(re.search(r"REG:(\d+)", line).group(1)) <= 255
        assert re.search(r"\d+ LDG.E.128", line), line  # the packed words, 16 bytes a load


def test_a_malformed_config_is_a_clear_error():
    from benchmarks.w4a16_sass import parse_config

    assert parse_config("16,64,128,4,3") == (16, 64, 128, 4, 3)
    for text in ("16,64,128,4", "16,64,128,4,3,prefetch", "16,64,x,4,3"):
        with pytest.raises(SystemExit, match="block_m,block_n,block_k,num_warps,num_stages"):
            parse_config(text)
