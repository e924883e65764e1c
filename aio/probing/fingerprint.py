"""A tier's fingerprint: what its answers depend on. A probe measurement belongs to one fingerprint, so a changed
model file or a setting that changes answers is measured again, and a measurement shipped with a demo is used only
for the very files it was made with.

Local tier: the SHA-256 of its model files (a .gguf file, or a checkpoint folder's weights, config and tokenizer
files) with the engine settings that change answers. Remote tier: its base URL and model name (what the server
runs behind them is its operator's). Hashing a file is cached under $AIO_HOME, keyed by path, size and mtime.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from aio.settings import TierSettings

# EngineConfig fields that change what a tier answers (the rest change speed or memory only).
ANSWER_SETTINGS = ("quantization", "quantization_group_size", "quantize_lm_head", "dtype", "device", "max_model_len")
_FOLDER_FILES = ("*.safetensors", "*.bin", "config.json", "generation_config.json", "tokenizer*", "*.model",
                 "chat_template*")
_CHUNK = 1 << 22
_cache_lock = threading.Lock()


def tier_fingerprint(settings: TierSettings, home: Path) -> str:
    """"sha256:<hex>" over the model's identity and the answer-changing settings."""
    if settings.is_remote:
        identity = {"remote": settings.base_url.rstrip("/"), "model": settings.model}
    else:
        engine = settings.engine
        identity = {"files": model_files_digest(Path(settings.path), home),
                    "settings": {name: _plain(getattr(engine, name, None)) for name in ANSWER_SETTINGS}}
    return "sha256:" + hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def model_files_digest(path: Path, home: Path) -> str:
    """The SHA-256 of a model file, or of a folder's model files (names and digests, sorted)."""
    if path.is_file():
        return file_sha256(path, home)
    files = sorted({f for pattern in _FOLDER_FILES for f in path.glob(pattern) if f.is_file()})
    listing = [(f.name, file_sha256(f, home)) for f in files]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def file_sha256(path: Path, home: Path) -> str:
    path = path.resolve()
    stat = path.stat()
    key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    cache = Path(home) / "fingerprints.json"
    with _cache_lock:
        known = _read(cache)
        if key in known:
            return known[key]
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    with _cache_lock:
        known = _read(cache)
        known[key] = value
        _write(cache, known)
    return value


def _read(cache: Path) -> dict[str, str]:
    try:
        data = json.loads(cache.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(cache: Path, data: dict[str, str]) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, cache)


def _plain(value):
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)
