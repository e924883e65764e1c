"""Classifier models in the database: a registered version's folder is stored as a tar.gz in
`classifier_versions.model_blob`, so every replica (on any machine) loads a promoted version from the shared
database instead of a path on the machine that trained it. Unpacked once per version into a local cache."""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

MAX_BLOB_BYTES = 64 << 20  # bigger models (a fine-tuned encoder) stay at their path: put it on shared storage


class ModelStoreError(ValueError):
    pass


def pack(folder: Path) -> bytes | None:
    """The folder as a tar.gz, or None when it is larger than MAX_BLOB_BYTES."""
    folder = Path(folder)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    if size > MAX_BLOB_BYTES:
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def unpack(blob: bytes, version: str, cache_dir: Path) -> Path:
    """The blob's folder under `cache_dir` (extracted once; the name carries its hash, so a changed blob is
    extracted anew). Only plain files inside the folder are extracted (tarfile's "data" filter)."""
    digest = hashlib.sha256(blob).hexdigest()[:16]
    safe_version = "".join(c if c.isalnum() or c in "-_." else "_" for c in version)
    target = Path(cache_dir) / f"{safe_version}-{digest}"
    if target.is_dir():
        return target
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache_dir))
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        os.replace(staging, target)
    except (tarfile.TarError, OSError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if target.is_dir():  # another process unpacked it meanwhile
            return target
        raise ModelStoreError(f"cannot unpack the stored model of classifier {version}: {exc}") from exc
    return target
