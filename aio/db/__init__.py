"""The SQL log: models, engines, migrations, the background log writer and API keys.

The request path only builds `RequestRecord`s (`aio.db.records`, no SQLAlchemy) and hands them to a `LogWriter`;
the names below are therefore imported lazily, so that `import aio.db.records` stays free of SQLAlchemy.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "aio.db.database": ("DatabaseError", "make_engine", "safe_url", "session_factory"),
    "aio.db.keys": ("ApiKeyInfo", "KeyStore"),
    "aio.db.log_writer": ("LogWriter", "LogWriterStats"),
    "aio.db.migrate": ("current_revision", "downgrade", "head_revision", "is_up_to_date", "upgrade"),
    "aio.db.models": ("ApiKey", "Base", "ClassifierVersion", "DailyAggregate", "Request", "Verification"),
    "aio.db.records": ("RequestRecord",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
