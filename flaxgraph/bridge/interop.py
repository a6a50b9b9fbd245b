"""Plain flaxgraph modules and Linen modules as submodules of a bridge Module.

Source: Flax NNX 0.12 ``nnx.bridge.nnx_in_bridge_mdl`` / ``linen_in_bridge_mdl``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flax import linen

from flaxgraph.bridge.context import auto_name, current_context
from flaxgraph.bridge.linen_in_nnx import ToNNX, set_initializing
from flaxgraph.graphlib.inplace import update
from flaxgraph.graphlib.split_merge import state as graph_state
from flaxgraph.module_class import Module
from flaxgraph.rnglib.rngs import Rngs, RngState
from flaxgraph.transforms.compilation import jit
from flaxgraph.transforms.control import eval_shape

__all__ = ["linen_in_bridge_mdl", "nnx_in_bridge_mdl"]


def _parent(fn_name: str) -> Any:
    entry = current_context()
    if entry is None or entry.module.__dict__.get("scope") is None:
        raise ValueError(
            f"{fn_name}() makes a submodule of the bridge Module being called, but no bridge "
            "Module is being called.\nFix: call it inside setup() or a @bridge.compact method "
            "(during init/apply)."
        )
    return entry


def nnx_in_bridge_mdl(factory: Callable[[Rngs], Module], name: str | None = None) -> Module:
    """A plain flaxgraph Module as a submodule of the bridge Module being called.

    Args:
      factory: ``rngs -> Module``, called with the parent's RNG streams.
      name: the attribute name in a compact method (default ``ClassName_<n>``); in
        ``setup`` assign the result yourself.

    Returns:
      The submodule; outside ``init`` its Variables are filled from ``apply``'s variables.

    Raises:
      ValueError: called outside a bridge Module's ``setup``/compact method.
    """
    entry = _parent("nnx_in_bridge_mdl")
    parent = entry.module
    rngs = parent.scope.rngs
    if parent.is_initializing():
        module = factory(rngs)
    else:
        # Its Variables come from the variables passed to apply: build it abstractly
        # (no initializer runs), with real RNG state drawn from the parent's streams.
        rngs = rngs if rngs.items() else Rngs(0)
        module = eval_shape(factory, rngs)
        update(module, jit(lambda r: graph_state(factory(r), RngState))(rngs))
    if entry.in_compact:
        setattr(parent, name or auto_name(entry, type(module)), module)
    return module


def linen_in_bridge_mdl(linen_module: linen.Module, name: str | None = None) -> Module:
    """A Linen module (wrapped in ``ToNNX``) as a submodule of the bridge Module being called.

    Args:
      linen_module: the Linen module.
      name: the attribute name in a compact method (default ``ClassName_<n>``).

    Returns:
      The ``ToNNX`` wrapper (initializing when the parent is).

    Raises:
      ValueError: called outside a bridge Module's ``setup``/compact method.
    """
    entry = _parent("linen_in_bridge_mdl")
    parent = entry.module
    module = ToNNX(linen_module, parent.scope.rngs)
    set_initializing(module, parent.is_initializing())
    if entry.in_compact:
        setattr(parent, name or auto_name(entry, type(linen_module)), module)
    return module
