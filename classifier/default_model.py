"""The shipped default classifier (`classifier/default/`, built by `python -m classifier.build_default`)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parent / "default"


@lru_cache(maxsize=1)
def _load():
    from classifier.learned import load_folder

    return load_folder(DEFAULT_DIR)


def load_default():
    """The shipped default 3-tier classifier (loaded once per process; raises ClassifierError if missing)."""
    return _load()
