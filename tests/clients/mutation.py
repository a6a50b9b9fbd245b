"""A deliberately wrong flaxgraph, made in the harness: proof that the client contract can fail.

``--mutation skip-write-back`` (``programs.py``, ``contract.py``) makes, in the flaxgraph-side
process only, every function built by ``nnx.jit``, ``nnx.grad`` and ``nnx.value_and_grad`` put the
graph nodes it was called with back as they were before the call: their Variables get their
pre-call values again, so an update a transform should write back to the caller's objects (an
optimizer step, a batch-norm statistic, an RNG count) is lost. Nothing in flaxgraph is edited: the
three names are wrapped on the ``flaxgraph`` module before any client imports them, and the
wrapper uses only public API (``nnx.state``, ``nnx.to_pure_dict``, ``nnx.replace_by_pure_dict``,
``nnx.update``), so it does not depend on how the transforms are implemented; ``nnx.cached_partial``
of such a function stays the transform's own (Tunix reads its ``jitted_fn``) and restores too.

Example::

    import flaxgraph
    from mutation import apply
    apply("skip-write-back", flaxgraph)   # then flaxgraph.install_as_flax_nnx()
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

MUTATIONS = ("skip-write-back",)


def _nodes(args: tuple[Any, ...], kwargs: dict[str, Any], nnx: Any) -> list[Any]:
    """The graph nodes among the arguments, at the top level or one container deep."""
    found: list[Any] = []
    for arg in (*args, *kwargs.values()):
        items = (
            arg.values()
            if isinstance(arg, dict)
            else arg
            if isinstance(arg, (list, tuple))
            else [arg]
        )
        found += [item for item in items if isinstance(item, nnx.Pytree)]
    return found


def _copied(tree: Any) -> Any:
    import jax

    return jax.tree.map(lambda a: a.copy() if isinstance(a, jax.Array) else a, tree)


class _Restoring:
    """``transformed``, but the graph nodes it is called with are restored after each call.

    Any other attribute (``jitted_fn``, ``lower``, ...) is the transformed function's own, and it
    binds as a method as a function does, so a client sees the transform it asked for.
    """

    def __init__(
        self, transformed: Callable[..., Any], nnx: Any, bound: tuple[Any, ...] = ()
    ) -> None:
        self.transformed, self.nnx, self.bound = transformed, nnx, bound
        functools.update_wrapper(self, transformed)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        nnx = self.nnx
        nodes = _nodes((*self.bound, *args), kwargs, nnx)
        # copies: the call may donate the arguments' buffers (Tunix donates its optimizer's)
        before = [_copied(nnx.to_pure_dict(nnx.state(node))) for node in nodes]
        out = self.transformed(*args, **kwargs)
        for node, values in zip(nodes, before, strict=True):
            state = nnx.state(node)
            nnx.replace_by_pure_dict(state, values)
            nnx.update(node, state)
        return out

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else functools.partial(self, instance)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["transformed"], name)


def _wrap(transform: Callable[..., Any], nnx: Any) -> Callable[..., Any]:
    @functools.wraps(transform)
    def wrapped(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None or not callable(fun):  # used as @nnx.jit(...) with options
            extra = () if fun is None else (fun,)
            return lambda f: wrapped(f, *extra, *args, **kwargs)
        return _Restoring(transform(fun, *args, **kwargs), nnx)

    return wrapped


def _wrap_cached_partial(cached_partial: Callable[..., Any], nnx: Any) -> Callable[..., Any]:
    """``nnx.cached_partial`` of a wrapped transform: the transform's own, still restoring (the
    bound graph nodes too)."""

    @functools.wraps(cached_partial)
    def wrapped(fun: Any, *args: Any) -> Any:
        if isinstance(fun, _Restoring):
            return _Restoring(cached_partial(fun.transformed, *args), nnx, args)
        return cached_partial(fun, *args)

    return wrapped


def apply(name: str, nnx: Any) -> None:
    """Applies mutation ``name`` to the module ``nnx`` (flaxgraph) in this process.

    Raises:
      ValueError: ``name`` is not one of ``MUTATIONS``.
    """
    if name not in MUTATIONS:
        raise ValueError(f"unknown mutation {name!r}; choose one of {', '.join(MUTATIONS)}")
    for transform in ("jit", "grad", "value_and_grad"):
        setattr(nnx, transform, _wrap(getattr(nnx, transform), nnx))
    nnx.cached_partial = _wrap_cached_partial(nnx.cached_partial, nnx)
