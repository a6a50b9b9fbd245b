"""Exceptions raised by flaxgraph (each a ``ValueError`` or ``TypeError``) and the helpers that
word their messages (what, where, the fix: ``docs/design.md``, "Errors")."""

from __future__ import annotations

from collections.abc import Sequence


class FlaxgraphError(Exception):
    """Base class of every flaxgraph exception."""


class TraceContextError(FlaxgraphError, ValueError):
    """An Object or Variable created outside a transform was mutated inside it (the new value
    would be a tracer that leaks out)."""


class GraphStructureError(FlaxgraphError, ValueError):
    """A State, GraphDef or update does not match the structure of a graph."""


class UnmatchedLeafError(FlaxgraphError, ValueError):
    """``split`` found a leaf that none of the given filters matches."""


class StaticAttributeError(FlaxgraphError, TypeError):
    """A static attribute cannot live in a GraphDef (it is unhashable)."""


class UnclassifiableValueError(FlaxgraphError, TypeError):
    """JAX's pytree registry fails to flatten a value, so it is neither data nor static.

    The message names the value's type (and, on assignment, the attribute) and how to mark
    it (``nnx.static(...)``/``nnx.data(...)``); ``value`` is the value.
    """

    def __init__(self, message: str, value: object = None):
        super().__init__(message)
        self.value = value


class InvalidFilterError(FlaxgraphError, TypeError):
    """A value cannot be used as a filter."""


class SharedReferenceError(FlaxgraphError, ValueError):
    """Tree mode met a Variable reachable along several paths, or a ``graph_updates=False``
    transform met one among both its inputs and outputs; the message lists every path."""


class ScopeParamNotFoundError(FlaxgraphError, ValueError):
    """A wrapped Linen module (``nnx.bridge.ToNNX``) needed a variable ``lazy_init`` did not
    create; the bridge raises a subclass that is also Linen's error of this name."""


class FlaxInternalError(FlaxgraphError, NotImplementedError):
    """A Flax-internal name with no counterpart in flaxgraph was used; the message names what to
    use instead (``guides/from_flax.md``, "Flax-internal names at their dotted paths")."""


class IdentityHashWarning(UserWarning):
    """A static attribute hashes by identity, so each new model instance gets a new GraphDef
    and recompiles."""


MAX_LISTED = 10
"""How many items (paths, inputs, names) a message lists before "... and N more"."""


def numbered_fixes(fixes: Sequence[str]) -> str:
    """Formats fixes as ``  1. …`` lines, the closing part of most messages."""
    return "\n".join(f"  {i}. {fix}" for i, fix in enumerate(fixes, 1))
