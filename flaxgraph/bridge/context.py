"""The thread-local stack of bridge modules being called (pushed by ``apply``, ``setup`` and
compact methods; read to attach submodules and by ``ToNNX`` for mutable collections).

Source: Flax NNX 0.12 ``flax.nnx.bridge.module`` (``MODULE_CONTEXT``, ``current_module``)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

__all__ = ["MODULE_CONTEXT", "ModuleStackEntry", "current_context", "current_module", "entered"]


@dataclasses.dataclass
class ModuleStackEntry:
    """One bridge module being called: ``in_compact``, and ``type_counter`` for auto names."""

    module: Any
    in_compact: bool
    type_counter: defaultdict[type, int] = dataclasses.field(
        default_factory=lambda: defaultdict(int)
    )


@dataclasses.dataclass
class ModuleContext(threading.local):
    """Per-thread stack of ``ModuleStackEntry`` (``None`` at the bottom)."""

    module_stack: list[ModuleStackEntry | None] = dataclasses.field(default_factory=lambda: [None])


# The one context of the bridge (like Linen's own module stack): changed only
# through `entered`.
MODULE_CONTEXT = ModuleContext()


@contextlib.contextmanager
def entered(module: Any, in_compact: bool) -> Iterator[ModuleStackEntry]:
    """Pushes ``module`` on the stack for the block."""
    entry = ModuleStackEntry(module, in_compact)
    MODULE_CONTEXT.module_stack.append(entry)
    try:
        yield entry
    finally:
        MODULE_CONTEXT.module_stack.pop()


def current_context() -> ModuleStackEntry | None:
    """The innermost bridge module call: a ``ModuleStackEntry`` (``.module``, ``.in_compact``) or ``None``.

    >>> import flaxgraph as nnx
    >>> nnx.bridge.current_context() is None
    True
    """
    return MODULE_CONTEXT.module_stack[-1]


def current_module() -> Any:
    """The bridge module being called (``None`` outside any), e.g. for ``is_initializing()``."""
    entry = MODULE_CONTEXT.module_stack[-1]
    return None if entry is None else entry.module


def auto_name(entry: ModuleStackEntry, cls: type) -> str:
    """The next automatic submodule name for ``cls`` in a compact method (``Dense_0``…)."""
    index = entry.type_counter[cls]
    entry.type_counter[cls] += 1
    return f"{cls.__name__}_{index}"
