"""Exceptions raised by flaxgraph and the helpers that word their messages.

Every exception subclasses the standard ``ValueError`` or ``TypeError``, so an
``except ValueError`` written for plain JAX code still catches it. A message
says *what* was wrong, *where* (a path from the root the user passed, such as
``args[1][0].linear.kernel``), and *how to fix it*, with numbered options when
there are several.
"""

from __future__ import annotations

from collections.abc import Sequence


class FlaxgraphError(Exception):
    """Base class of every flaxgraph exception."""


class TraceContextError(FlaxgraphError, ValueError):
    """An Object or Variable was mutated from a JAX trace other than its own.

    Raised when code inside a transform (``jax.jit``, ``flaxgraph.jit``, …)
    mutates an object that was created outside it and captured by closure: the
    new value would be a tracer that leaks out of the transform.
    """


class GraphStructureError(FlaxgraphError, ValueError):
    """A State, GraphDef or update does not match the structure of a graph."""


class UnmatchedLeafError(FlaxgraphError, ValueError):
    """``split`` found a leaf that none of the given filters matches."""


class StaticAttributeError(FlaxgraphError, TypeError):
    """A static attribute cannot live in a GraphDef (it is unhashable)."""


class UnclassifiableValueError(FlaxgraphError, TypeError):
    """flaxgraph cannot tell whether a value is data or static: JAX's pytree registry
    fails to flatten it. The message names the value's type (and, raised on
    assignment, the attribute) and how to mark it (``nnx.static(...)``/``nnx.data(...)``);
    ``value`` is the value."""

    def __init__(self, message: str, value: object = None):
        super().__init__(message)
        self.value = value


class InvalidFilterError(FlaxgraphError, TypeError):
    """A value cannot be used as a filter."""


class SharedReferenceError(FlaxgraphError, ValueError):
    """Tree mode (``graph=False``) met a Variable reachable along several paths, or a
    ``graph_updates=False`` transform met a Variable both among its inputs and its
    outputs; pytrees cannot share. The message lists every path of the Variable."""


class ScopeParamNotFoundError(FlaxgraphError, ValueError):
    """A wrapped Linen module (``nnx.bridge.ToNNX``) needed a variable that
    ``lazy_init`` did not create (it ran another method, or another input). The
    bridge raises a subclass that is also Linen's ``flax.errors.ScopeParamNotFoundError``."""


class FlaxInternalError(FlaxgraphError, NotImplementedError):
    """A Flax-internal class or function that has no counterpart in flaxgraph's design was
    used (a tree-mode ``Simple*`` wrapper, a hijax primitive, a Flax-private context). The
    message names it and what to use instead; ``guides/from_flax.md`` ("Flax-internal names
    at their dotted paths") lists every such name with its reason."""


class IdentityHashWarning(UserWarning):
    """A static attribute hashes by identity, so every new instance of the model gets
    a different GraphDef and recompiles the transforms that take it."""


MAX_LISTED = 10
"""How many items (paths, inputs, names) a message lists before "... and N more"."""


def numbered_fixes(fixes: Sequence[str]) -> str:
    """Formats fixes as ``  1. …`` lines, the closing part of most messages."""
    return "\n".join(f"  {i}. {fix}" for i, fix in enumerate(fixes, 1))
