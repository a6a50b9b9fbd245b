"""Flax NNX's ``tracers``: a record of the JAX trace an object was created in.

A :class:`TraceState` taken when an object is built says, later, whether code still runs in
that same trace (:meth:`TraceState.is_valid`); outside every transform that is the top-level
(eager) trace, inside ``jax.jit``/``nnx.jit`` the transform's. flaxgraph's own Objects and
Variables keep the token of :mod:`flaxgraph.tracing` directly; this module is the class Flax
code (a library's ``Variable`` or ``Module`` subclass) builds and compares.

Example::

  >>> import jax
  >>> from flaxgraph import tracers
  >>> outer = tracers.TraceState()
  >>> outer.is_valid()
  True
  >>> jax.jit(lambda x: x if outer.is_valid() else -x)(1.0)  # another trace inside jit
  Array(-1., dtype=float32, weak_type=True)

A TraceState is a JAX pytree with no leaves: unflattened (crossing a transform) it takes the
trace current there. Pickled, it is restored with the trace current at load.

Source: Flax NNX 0.12.8 ``flax.nnx.tracers`` (behaviour read from its public source).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax

from flaxgraph import reprlib
from flaxgraph.tracing import current_trace

__all__ = ["TraceState", "current_jax_trace"]


def current_jax_trace() -> object:
    """A token for the JAX trace active now: equal tokens mean the same trace.

    Returns:
      An opaque, hashable object (JAX's reference to its current trace).
    """
    return current_trace()


class TraceState(reprlib.Representable):
    """The JAX trace active when it was made; :meth:`is_valid` says whether it still is.

    Equality compares the traces. Pickling keeps nothing: the state loads with the trace
    current at load time, as does a TraceState rebuilt from a pytree.
    """

    __slots__ = ("_jax_trace",)

    def __init__(self) -> None:
        self._jax_trace = current_jax_trace()

    @property
    def jax_trace(self) -> object:
        """The recorded trace token."""
        return self._jax_trace

    def is_valid(self) -> bool:
        """Whether code runs in the trace this state recorded.

        Returns:
          ``True`` in that trace, ``False`` inside another transform's trace.
        """
        return self._jax_trace == current_jax_trace()

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type(self).__name__)
        yield reprlib.Attr("jax_trace", self._jax_trace)

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        import treescope  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return treescope.repr_lib.render_object_constructor(
            object_type=type(self),
            attributes={"jax_trace": self._jax_trace},
            path=path,
            subtree_renderer=subtree_renderer,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TraceState) and self._jax_trace == other._jax_trace

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._jax_trace = current_jax_trace()


jax.tree_util.register_pytree_node(
    TraceState, lambda state: ((), None), lambda aux, children: TraceState()
)
