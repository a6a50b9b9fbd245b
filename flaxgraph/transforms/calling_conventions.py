"""The shape of a transformed callable: decorators, static arguments, methods.

Source: Flax NNX 0.12's transforms (bound methods refused); ``jax.jit``
(``static_argnums``/``static_argnames`` completed from the signature).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from flaxgraph.graphlib.registry import is_hashable, is_node_or_variable


def decorator(transform: Callable[..., Any]) -> Callable[..., Any]:
    """Lets ``transform(f, **kw)`` also be used as ``@transform`` and ``@transform(**kw)``."""

    @functools.wraps(transform)
    def wrapper(f: object = None, /, *args: object, **kwargs: object) -> object:
        if f is None:
            return lambda g: transform(g, *args, **kwargs)
        return transform(f, *args, **kwargs)

    return wrapper


def _bound_graph_method(f: object) -> Any:
    """The bound method of a graph object inside ``f`` (through partials), or ``None``."""
    while isinstance(f, functools.partial):
        f = f.func
    if inspect.ismethod(f) and is_node_or_variable(f.__self__):
        return f
    return None


def check_not_bound_method(f: object, transform: str) -> None:
    """Raises ``ValueError`` for a bound method of a graph object, also inside a partial."""
    method = _bound_graph_method(f)
    if method is None:
        return
    owner = type(method.__self__).__name__
    name = getattr(method.__func__, "__name__", "method")
    raise ValueError(
        f"nnx.{transform} does not support bound methods, but it was given "
        f"{owner}.{name} bound to an instance: the instance would be hidden from the "
        f"transform (its state neither traced nor updated).\nFix: use the decorator form "
        f"@nnx.{transform} on the method definition, or call "
        f"nnx.{transform}({owner}.{name})(instance, ...) with the unbound method "
        f"(nnx.{transform}(instance) works for __call__)."
    )


def unbind(f: Any, transform: str = "transform") -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """``(type(f).__call__, (f,))`` for a Module instance, else ``(f, ())``."""
    check_not_bound_method(f, transform)
    if is_node_or_variable(f) and callable(f):
        return type(f).__call__, (f,)
    return f, ()


def normalize_argnums(argnums: int | Iterable[int] | None) -> tuple[int, ...]:
    """``argnums`` (an int, an iterable of ints or ``None``) as a tuple of ints."""
    return () if argnums is None else (argnums,) if isinstance(argnums, int) else tuple(argnums)


def normalize_argnames(argnames: str | Iterable[str] | None) -> tuple[str, ...]:
    """``argnames`` (a string, an iterable or ``None``) as a tuple of strings."""
    return () if argnames is None else (argnames,) if isinstance(argnames, str) else tuple(argnames)


def infer_argnums_and_argnames(
    fun: Callable[..., Any], argnums: tuple[int, ...], argnames: tuple[str, ...]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Completes ``(argnums, argnames)`` from ``fun``'s signature as ``jax.jit`` does.

    Example::

      >>> def f(x, n): ...
      >>> infer_argnums_and_argnames(f, (), ("n",))
      ((1,), ('n',))
    """
    if bool(argnums) == bool(argnames):
        return argnums, argnames
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return argnums, argnames
    positional = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if argnums:
        named = tuple(
            positional[i]
            for i in argnums
            if -len(positional) <= i < len(positional)
            and params[i % len(positional)].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        return argnums, named
    nums = tuple(positional.index(n) for n in argnames if n in positional)
    return nums, argnames


def split_static(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    static_argnums: tuple[int, ...],
    static_argnames: tuple[str, ...],
) -> tuple[tuple[Any, ...], dict[str, Any], tuple[Any, ...]]:
    """``(dynamic_args, dynamic_kwargs, statics)``; ``TypeError`` if a static one is unhashable."""
    if not static_argnums and not static_argnames:
        return args, kwargs, ()
    n = len(args)
    nums = tuple(sorted(i % n for i in static_argnums if -n <= i < n))
    static_args = tuple((i, args[i]) for i in nums)
    static_kwargs = tuple((k, kwargs[k]) for k in static_argnames if k in kwargs)
    statics = (static_args, static_kwargs)
    try:
        hash(statics)
    except TypeError:
        bad = [f"args[{i}]" for i, v in static_args if not is_hashable(v)] + [
            f"kwargs[{k!r}]" for k, v in static_kwargs if not is_hashable(v)
        ]
        raise TypeError(
            f"Static arguments must be hashable, but {', '.join(bad)} is not.\nFix: pass a "
            "hashable value (a tuple instead of a list…), or make the argument dynamic."
        ) from None
    dyn_args = tuple(a for i, a in enumerate(args) if i not in nums)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
    return dyn_args, dyn_kwargs, statics


def merge_static(
    args: tuple[Any, ...], kwargs: dict[str, Any], statics: tuple[Any, ...]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The inverse of ``split_static``."""
    if not statics:
        return args, kwargs
    static_args, static_kwargs = statics
    full = list(args)
    for i, v in static_args:
        full.insert(i, v)
    return tuple(full), {**kwargs, **dict(static_kwargs)}
