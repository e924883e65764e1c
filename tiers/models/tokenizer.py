"""The tokenizer of a checkpoint folder, if it has one."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def load_tokenizer(path: str | Path) -> Any | None:
    """A transformers tokenizer, or None when the folder has no tokenizer.json / tokenizer.model."""
    path = Path(path)
    if not ((path / "tokenizer.json").is_file() or (path / "tokenizer.model").is_file()):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))
