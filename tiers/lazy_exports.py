"""A package's public names, imported from their modules on first use (PEP 562), so that importing one light
submodule does not pull in torch through the package's `__init__`."""
from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def lazy_getattr(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """The module-level `__getattr__` of `package`: `exports` maps each public name to the module defining it."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(exports[name]), name)

    return __getattr__
