"""Warnings attributed to the user's call of a transformed function (``warn_at_caller``).

Source: Python's ``warnings.warn_explicit`` (the registry and filters it uses).
"""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _internal(filename: str) -> bool:
    return (
        filename.startswith(_PACKAGE)
        or f"{os.sep}jax{os.sep}" in filename
        or f"{os.sep}jaxlib{os.sep}" in filename
        or filename.startswith(("<frozen ", "<flaxgraph "))  # generated fast-path code
    )


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first frame outside flaxgraph and JAX."""
    frame = sys._getframe(1)
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        warnings.warn(message, category, stacklevel=2)
        return
    module_globals = frame.f_globals
    warnings.warn_explicit(
        message,
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=module_globals.get("__name__", "<unknown>"),
        registry=module_globals.setdefault("__warningregistry__", {}),
        module_globals=module_globals,
    )
