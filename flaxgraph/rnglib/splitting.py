"""Splitting, forking, resetting and restoring random streams around ``vmap``/``scan``.

See the package README. Source: Flax NNX 0.12 ``nnx.split_rngs``, ``nnx.fork_rngs``,
``nnx.reseed``, ``nnx.restore_rngs``, ``flax.nnx.rnglib.backup_keys``/``SplitBackups``
(Flax NNX's "Transformations" guide, "Random state").
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from flaxgraph.filterlib import to_predicate
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.modes import resolve
from flaxgraph.node_copy import copy_nodes
from flaxgraph.rnglib.broadcast_mark import BROADCAST, BROADCAST_MARK, MarkBackups, mark
from flaxgraph.rnglib.rngs import (
    NO_MATCH,
    RngCount,
    RngKey,
    Rngs,
    RngStream,
    as_key,
    first_match,
    rule_list,
)
from flaxgraph.typing import MISSING


def reseed(
    node: Any,
    /,
    *,
    graph: bool | None = None,
    policy: str | Callable[[tuple[Any, ...], Any, tuple[int, ...]], Any] = "scalars_only",
    **stream_keys: Any,
) -> None:
    """Resets the streams named in ``stream_keys`` everywhere in ``node``: count 0, a new key.

    Which key each stream gets: see the package README, "Streams".

    Args:
      node: the object (Module, Rngs…) whose streams to reset.
      graph: ``False`` walks in tree mode (a shared Variable is an error); ``None`` the
        default.
      policy: for a stream whose key is not a scalar: ``'scalars_only'`` raises,
        ``'match_shape'`` splits the new key to that shape, a callable
        ``(path, key, shape) -> new_key`` decides.
      **stream_keys: stream name -> int.

    Raises:
      ValueError: with ``'scalars_only'``, a stream's key has a shape (the message names
        its path and the fix); nothing is reset then.

    >>> import jax, flaxgraph as nnx
    >>> stream = nnx.Rngs(dropout=42).dropout.fork()   # as nnx.Dropout keeps it
    >>> first = stream()
    >>> nnx.reseed(stream, dropout=42)     # fold_in(key(42), 0) again, count 0
    >>> bool((jax.random.key_data(stream()) == jax.random.key_data(first)).all())
    True
    """
    if not (policy in ("scalars_only", "match_shape") or callable(policy)):
        raise ValueError(
            f"nnx.reseed: unknown policy {policy!r}; use 'scalars_only', 'match_shape' or "
            "a callable (path, key, shape) -> new_key."
        )
    fresh = Rngs(**{name: as_key(seed) for name, seed in stream_keys.items()})
    writes = []
    for path, value in iter_graph(node, graph=graph):
        if not (isinstance(value, RngStream) and value.tag in stream_keys):
            continue
        key = fresh[value.tag]()  # the first key of a fresh stream, like a fork of it
        shape = tuple(value.key.value.shape)
        if callable(policy):
            key = policy(path, key, shape)
        elif shape and policy == "scalars_only":
            raise ValueError(
                f"nnx.reseed: the {value.tag!r} stream at {'/'.join(map(str, path))} has "
                f"a key of shape {shape} (it was split), and policy='scalars_only'.\n"
                "Fix: pass policy='match_shape' to split the new key to that shape, or "
                "a callable (path, key, shape) -> new_key."
            )
        elif shape:
            key = jax.random.split(key, shape)
        writes.append((value, key))
    for stream, key in writes:
        stream.key.value = key
        stream.count.value = jnp.zeros(key.shape, dtype=jnp.uint32)


# -- splitting streams around a transform ----------------------------------------------


@functools.partial(jax.tree_util.register_dataclass, data_fields=["backups"], meta_fields=[])
@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class RngBackups:
    """What ``split_rngs``/``fork_rngs`` replaced, to put back with ``restore()`` or a ``with`` block.

    A frozen pytree whose one field, ``backups``, holds ``(stream, key, count)`` (or
    ``(stream, key)``) tuples (Flax's ``SplitBackups``); iterable; equality is identity.

    >>> import flaxgraph as nnx
    >>> rngs = nnx.Rngs(0)
    >>> backups = nnx.split_rngs(rngs, splits=2)
    >>> [stream is rngs.default for stream, _, _ in backups.backups]
    [True]
    >>> backups.restore(); rngs.default.key.shape
    ()
    """

    backups: list[tuple[Any, ...]]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.backups)

    def replace(self, **changes: Any) -> RngBackups:
        """A copy with the given fields (only ``backups``) changed."""
        return dataclasses.replace(self, **changes)

    def restore(self) -> None:
        """Puts back every replaced key (and count, when the entry has one)."""
        restore_rngs(self.backups)

    def __enter__(self) -> RngBackups:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def restore_rngs(backups: RngBackups | MarkBackups | Iterable[tuple[Any, ...]], /) -> None:
    """Puts back the keys ``split_rngs``/``fork_rngs`` replaced, or those ``backup_keys`` saved.

    Args:
      backups: what ``split_rngs``/``fork_rngs`` returned, or an iterable of
        ``(stream, key)`` and ``(stream, key, count)`` tuples.

    Raises:
      ValueError: an entry is not such a tuple.

    >>> import flaxgraph as nnx
    >>> rngs = nnx.Rngs(0)
    >>> backups = nnx.split_rngs(rngs, splits=4)
    >>> rngs.default.key.shape
    (4,)
    >>> nnx.restore_rngs(backups); rngs.default.key.shape
    ()
    """
    if isinstance(backups, (RngBackups, MarkBackups)):
        backups.restore()
        return
    for entry in backups:
        if not (isinstance(entry, tuple) and len(entry) in (2, 3)):
            raise ValueError(
                f"restore_rngs expected (stream, key) or (stream, key, count) tuples, got "
                f"{entry!r}.\nFix: pass what split_rngs/fork_rngs or backup_keys returned."
            )
        entry[0].key.value = entry[1]
        if len(entry) == 3:
            entry[0].count.value = entry[2]


def backup_keys(node: Any, /, *, graph: bool | None = None) -> list[tuple[RngStream, Any]]:
    """The current key of every ``RngStream`` of ``node``, to put back with ``restore_rngs``.

    Args:
      node: any graph (a Module, an ``Rngs``, containers of them).
      graph: ``False`` walks in tree mode; ``None`` the default.

    Returns:
      A list of ``(stream, key array)`` pairs, each stream once, in walk order.

    Raises:
      SharedReferenceError: tree mode and a Variable reachable twice.

    >>> import flaxgraph as nnx
    >>> rngs = nnx.Rngs(params=0, dropout=1)
    >>> saved = nnx.rnglib.backup_keys(rngs)
    >>> nnx.reseed(rngs, params=5)
    >>> nnx.restore_rngs(saved)
    >>> bool((nnx.Rngs(params=0).params.key.value == rngs.params.key.value).all())
    True
    """
    return [
        (stream, stream.key.value)
        for _, stream in iter_graph(node, graph=graph)
        if isinstance(stream, RngStream)
    ]


def _selected(node: Any, rules: list[tuple[Any, Any, Any]], only: Any) -> list[Any]:
    """``(path, stream, shape)`` of each stream ``only`` selects and a rule matches (first rule wins)."""
    only_p = to_predicate(only)
    found = []
    for path, value in iter_graph(node):
        if not isinstance(value, RngStream):
            continue
        where, key = (*path, "key"), value.key
        if not only_p(where, key):
            continue
        shape = first_match(rules, where, key, NO_MATCH)
        if shape is not NO_MATCH:
            found.append((path, value, shape))
    return found


def _marked(key: Any, shape: Any) -> Any:
    """The ``make`` of ``split_rngs(splits=BROADCAST)``: keys are kept, only marked."""
    raise AssertionError("never called")  # pragma: no cover


def _in_place(
    node: Any, rules: list[tuple[Any, Any, Any]], only: Any, make: Any
) -> RngBackups | MarkBackups:
    """Replaces the selected streams' key (``make(stream(), shape)``) and count in place."""
    if make is _marked:
        return MarkBackups([mark(s.key) for _, s, _ in _selected(node, rules, only)])
    entries = []
    for _, stream, shape in _selected(node, rules, only):
        new_key = make(stream(), shape)  # consumes one key: every call splits afresh
        entries.append((stream, stream.key.value, stream.count.value))
        stream.key.value = new_key
        stream.count.value = jnp.zeros(new_key.shape, dtype=jnp.uint32)
    return RngBackups(entries)


def _copied(node: Any, rules: list[tuple[Any, Any, Any]], only: Any, make: Any, graph: bool) -> Any:
    """A copy of ``node`` sharing its Variables whose selected streams are new; the originals advance."""
    # Copied streams share their key Variable with the original: find them by it.
    chosen = {id(s.key): (s.key, shape) for _, s, shape in _selected(node, rules, only)}

    def f(path: Any, copy: Any) -> Any:
        entry = chosen.get(id(copy.key)) if isinstance(copy, RngStream) else None
        if entry is not None and entry[0] is copy.key and make is _marked:
            copy.key = RngKey(copy.key.value, tag=copy.tag, **{BROADCAST_MARK: True})
        elif entry is not None and entry[0] is copy.key:
            new_key = make(copy(), entry[1])  # advances the shared count Variable
            copy.key = RngKey(new_key, tag=copy.tag)
            copy.count = RngCount(jnp.zeros(new_key.shape, dtype=jnp.uint32), tag=copy.tag)
        return copy

    return copy_nodes(node, f, graph=graph)


def rng_decorator(apply: Any, in_place: bool) -> Any:
    """The decorator form: ``f`` runs inside ``with apply((args, kwargs))`` (``in_place``) or on what it returns."""

    def decorator(f: Any) -> Any:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if in_place:
                with apply((args, kwargs)):
                    return f(*args, **kwargs)
            new_args, new_kwargs = apply((args, kwargs))
            return f(*new_args, **new_kwargs)

        return wrapper

    return decorator


def _split_key(key: jax.Array, shape: Any, *, squeeze: bool) -> jax.Array:
    keys = jax.random.split(key, shape)
    return keys[0] if squeeze else keys


def _fork_key(key: jax.Array, shape: Any) -> jax.Array:
    return key if shape is None else jax.random.split(key, shape)


def _apply_mode(
    node: Any, rules: Any, only: Any, make: Any, graph: bool | None, graph_updates: bool | None
) -> Any:
    mode = resolve(graph, graph_updates)

    def apply(target: Any) -> Any:
        if mode.updates:
            return _in_place(target, rules, only, make)
        return _copied(target, rules, only, make, mode.graph)

    if node is MISSING:
        return rng_decorator(apply, mode.updates)
    return apply(node)


def split_rngs(
    node: Any = MISSING,
    /,
    *,
    splits: int | tuple[int, ...],
    only: Any = ...,
    squeeze: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Replaces the keys of the RNG streams in ``node`` by ``splits`` keys split from one draw.

    Each count gets that shape too; in place or on a copy: see the package README, "Split,
    fork, restore".

    Args:
      node: the graph holding the streams; omit it for the decorator form.
      splits: number (or shape) of keys; ``nnx.BROADCAST`` keeps the keys and marks the
        streams as broadcast on purpose (no ``nnx.RngBroadcastWarning``).
      only: a filter of streams; it sees each key Variable at ``(..., 'key')``.
      squeeze: drop the split axis (requires ``splits == 1``).
      graph: ``False`` for tree mode; ``None`` the default.
      graph_updates: ``False`` to return a copy; ``None`` the default.

    Returns:
      ``RngBackups`` (in place), a copy of ``node`` (copy modes), or a decorator.

    Raises:
      ValueError: ``squeeze`` with ``splits`` other than 1.
      SharedReferenceError (``ValueError``): tree mode and a Variable of ``node``
        reachable along several paths (the message lists them).

    >>> import flaxgraph as nnx
    >>> rngs = nnx.Rngs(params=0, dropout=1)
    >>> new = nnx.split_rngs(rngs, splits=5, only='params', graph_updates=False)
    >>> new.params.key.shape, new.dropout.key.shape, rngs.params.key.shape
    ((5,), (), ())
    >>> with nnx.split_rngs(rngs, splits=3):
    ...   rngs.dropout.key.shape
    (3,)
    """
    if splits is BROADCAST:
        return _apply_mode(
            node, rule_list({...: None}, "splits"), only, _marked, graph, graph_updates
        )
    if squeeze and splits != 1:
        raise ValueError(f"split_rngs(squeeze=True) needs splits=1, got splits={splits!r}.")
    make = functools.partial(_split_key, squeeze=squeeze)
    return _apply_mode(node, rule_list(splits, "splits"), only, make, graph, graph_updates)


def fork_rngs(
    node: Any = MISSING,
    /,
    *,
    split: Any = None,
    only: Any = ...,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Gives the RNG streams in ``node`` fresh independent keys (one draw each).

    Modes, backups and the decorator form are as in ``split_rngs``.

    Args:
      node: the graph holding the streams; omit it for the decorator form.
      split: ``None`` (fork every stream), a shape (split every stream), or
        ``{filter: shape or None}`` (first match forks or splits; others left alone).
      only: a filter further restricting the streams (not in Flax 0.12.8).
      graph, graph_updates: as in ``split_rngs``.

    Returns:
      ``RngBackups`` (in place), a copy of ``node`` (copy modes), or a decorator.

    Raises:
      TypeError: ``split`` is not a shape, ``None`` or a mapping of them.
      SharedReferenceError (``ValueError``): tree mode and shared Variables.

    >>> import flaxgraph as nnx
    >>> rngs = nnx.Rngs(params=0, dropout=1)
    >>> with nnx.fork_rngs(rngs, split={'params': 2}):
    ...   rngs.params.key.shape, int(rngs.dropout.count.value)
    ((2,), 0)
    """
    rules = rule_list({...: None} if split is None else split, "split")
    return _apply_mode(node, rules, only, _fork_key, graph, graph_updates)
