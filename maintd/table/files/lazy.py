"""Modules imported on first use, for the format's modules whose every import costs each command's start.

``pyarrow.compute`` builds a wrapper for each of its hundreds of kernels when imported: a tenth of the start
of ``maintd plan`` or ``maintd table describe``, which read the log and never compute on data. The modules that
write, merge, filter or bucket rows name it as usual for type checkers and get this stand-in at run time::

    if TYPE_CHECKING:
        import pyarrow.compute as pc
    else:
        pc = lazy_module("pyarrow.compute")
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for module ``name``, imported (under the import lock, so from any thread) on first attribute use;
    each attribute read is then kept on the stand-in, so a hot loop pays one lookup, as with the module."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = getattr(importlib.import_module(self._name), attr)
        setattr(self, attr, value)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> Any:
    """A stand-in for module ``name`` that imports it on first attribute use."""
    return LazyModule(name)
