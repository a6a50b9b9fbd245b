"""Random streams as ordinary state: ``Rngs``, ``RngStream`` and their Variables.

An ``RngStream`` holds a JAX key (``RngKey``) and a counter (``RngCount``);
calling it returns ``fold_in(key, count)`` and increments the counter, so every
call gives a new key and the stream's state is just two Variables that split,
jit and vmap like any other. ``Rngs`` groups named streams::

  >>> import jax, flaxgraph as nnx
  >>> rngs = nnx.Rngs(0, dropout=1)    # a 'default' stream and a 'dropout' stream
  >>> k1, k2 = rngs.params(), rngs.params()   # no 'params' stream: uses 'default'
  >>> bool((jax.random.key_data(k1) != jax.random.key_data(k2)).any())
  True
  >>> int(rngs.default.count.value)
  2

Keys are typed keys (``jax.random.key``). ``RngState`` is the base kind of
``RngKey`` and ``RngCount``, for filters such as ``StateAxes({nnx.RngState: 0, ...})``.
Each Variable carries its stream's name as ``tag`` metadata, so a string filter
(``'dropout'``) selects one stream's state.

Source: Flax NNX ``nnx.Rngs`` (0.12).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from flaxgraph.filterlib import to_predicate
from flaxgraph.graphlib.traversal import iter_graph
from flaxgraph.modes import resolve
from flaxgraph.module import Module
from flaxgraph.node_copy import copy_nodes
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.rnglib.samplers import RandomSamplers
from flaxgraph.variablelib.variable import Variable


class RngState(Variable[jax.Array]):
    """Base kind of the Variables that hold random state."""


class RngKey(RngState):
    """A stream's JAX key (typed key array)."""


class RngCount(RngState):
    """How many keys a stream has produced (uint32, same shape as its key)."""


def _as_key(seed: Any) -> jax.Array:
    if isinstance(seed, int):
        return jax.random.key(seed)
    try:
        seed = jnp.asarray(seed)
    except TypeError:
        raise TypeError(
            f"Cannot make a random key from {type(seed).__name__} {seed!r}; pass an int seed "
            "or a key from jax.random.key."
        ) from None
    if jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
        return seed
    if seed.dtype == jnp.uint32 and seed.shape[-1:] == (2,):
        return jax.random.wrap_key_data(seed)
    if jnp.issubdtype(seed.dtype, jnp.integer):
        return jax.random.key(seed) if seed.ndim == 0 else jax.vmap(jax.random.key)(seed)
    raise TypeError(
        f"Cannot make a random key from {type(seed).__name__} of dtype {seed.dtype}; pass an "
        "int seed or a key from jax.random.key."
    )


class RngStream(Pytree, RandomSamplers):
    """One named stream of random keys.

    Args:
      key: an int seed, a typed key (``jax.random.key``), a raw ``uint32[2]`` key,
        or an array of any of these (one stream per element, e.g. for ``vmap``).
      tag: the stream's name, stored as the Variables' ``tag`` metadata.

    Calling the stream returns a new key (``fold_in(key, count)``) and increments
    ``count``.
    """

    def __init__(self, key: Any, *, tag: str):
        key = _as_key(key)
        self.key = RngKey(key, tag=tag)
        self.count = RngCount(jnp.zeros(key.shape, dtype=jnp.uint32), tag=tag)
        self.tag = tag

    def __call__(self) -> jax.Array:
        self.count._check_settable()  # before touching values of another trace
        key = jax.random.fold_in(self.key.value, self.count.value)
        self.count.value = self.count.value + 1
        return key

    def fork(self, *, split: int | tuple[int, ...] | None = None) -> RngStream:
        """A new, independent stream seeded from this one (draws one key).

        ``split`` (deprecated, as in Flax NNX 0.12.8: use ``split(k)``) gives a stream
        of ``split`` keys instead; it warns with a ``DeprecationWarning``.
        """
        if split is not None:
            _warn_fork_split("RngStream")
            return self.split(split)
        return RngStream(self(), tag=self.tag)

    def split(self, k: int | tuple[int, ...]) -> RngStream:
        """A new stream of ``k`` independent keys (shape ``k + key.shape``), e.g. to
        ``vmap`` over; draws one key from this stream.

        Source: Flax NNX 0.12 ``RngStream.split``.
        """
        return RngStream(jax.random.split(self(), k), tag=self.tag)

    def broadcast(self, k: int | tuple[int, ...]) -> RngStream:
        """A new stream whose key is one fresh key repeated to shape ``k + key.shape``
        (every slice of a ``vmap`` over it then draws the *same* keys); draws one key.

        Source: Flax NNX 0.12 ``RngStream.broadcast``.
        """
        key = self()
        shape = (k,) if isinstance(k, int) else tuple(k)
        return RngStream(jnp.broadcast_to(key, shape + key.shape), tag=self.tag)


class Rngs(Module, RandomSamplers):
    """Named random streams (see the module docstring).

    Args:
      default: the seed of the ``default`` stream, used by any stream name that has
        no stream of its own; optional.
      **streams: ``name=seed`` for each stream (``params=0, dropout=1``).

    Raises:
      AttributeError: a stream is requested (``rngs.name``) that does not exist and
        there is no ``default`` stream (``KeyError`` for ``rngs['name']``).

    Source: Flax NNX ``nnx.Rngs``.
    """

    def __init__(self, default: Any = None, /, **streams: Any):
        if default is not None:
            streams = {"default": default, **streams}
        for name, seed in streams.items():
            setattr(self, name, seed if isinstance(seed, RngStream) else RngStream(seed, tag=name))

    def __getattr__(self, name: str) -> RngStream:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._stream(name, AttributeError)

    def __getitem__(self, name: str) -> RngStream:
        return self._stream(name, KeyError)

    def _stream(self, name: str, error: type[Exception]) -> RngStream:
        streams = self.__dict__
        if isinstance(streams.get(name), RngStream):
            return streams[name]  # type: ignore[no-any-return]
        if "default" in streams:
            return streams["default"]  # type: ignore[no-any-return]
        raise error(
            f"No RngStream named {name!r} found in Rngs, and it has no 'default' stream; "
            f"streams are {sorted(streams)}. Create it with nnx.Rngs({name}=seed) or give "
            "a default seed: nnx.Rngs(0)."
        )

    def __contains__(self, name: str) -> bool:
        return name in self.__dict__

    def __call__(self) -> jax.Array:
        return self.default()

    def items(self) -> list[tuple[str, RngStream]]:
        """The ``(name, RngStream)`` pairs, sorted by name."""
        return [(n, s) for n, s in sorted(self.__dict__.items()) if isinstance(s, RngStream)]

    def fork(self, /, *, split: Any = None) -> Rngs:
        """A new Rngs whose streams are forked from these (each advances by one).

        ``split`` (deprecated, as in Flax NNX 0.12.8, with a ``DeprecationWarning``;
        use ``split()``): an int or shape splits every stream, a mapping ``{filter:
        shape or None}`` the streams its first matching filter selects (``None``:
        plain fork); streams no filter selects are forked.

        Example::

          >>> import flaxgraph as nnx
          >>> rngs = nnx.Rngs(params=1, dropout=2)
          >>> new = rngs.fork()
          >>> int(rngs.params.count.value), int(new.params.count.value)
          (1, 0)
        """
        if split is not None:
            _warn_fork_split("Rngs")
        rules = _rules(split, "split")
        streams = {}
        for name, stream in self.items():
            shape = _first_match(rules, (name,), stream, None)
            streams[name] = (
                stream.split(shape) if shape is not None else RngStream(stream(), tag=stream.tag)
            )
        return Rngs(**streams)

    def split(self, k: Any) -> Rngs:
        """A new Rngs whose streams hold ``k`` keys each (``RngStream.split``).

        Args:
          k: an int or shape for every stream, or a mapping ``{filter: shape or None}``
            (first matching filter wins; ``None`` or no match: the stream is kept
            as is, the same ``RngStream`` object).

        Example::

          >>> import flaxgraph as nnx
          >>> rngs = nnx.Rngs(params=1, dropout=2).split({'params': 5, ...: None})
          >>> rngs.params.key.shape, rngs.dropout.key.shape
          ((5,), ())

        Source: Flax NNX 0.12 ``Rngs.split``.
        """
        return self._per_stream(k, "split", RngStream.split)

    def broadcast(self, k: Any) -> Rngs:
        """A new Rngs whose selected streams hold one fresh key repeated to shape ``k``
        (``RngStream.broadcast``): every slice of a ``vmap`` draws the same keys.

        Args:
          k: an int or shape for every stream, ``None`` (nothing is broadcast), or a
            mapping ``{filter: shape or None}`` (first matching filter wins; ``None``
            or no match: the stream is kept as is).

        Example::

          >>> import jax, flaxgraph as nnx
          >>> rngs = nnx.Rngs(0).broadcast(5)
          >>> rngs.default.key.shape
          (5,)
          >>> bool((jax.random.key_data(rngs.default.key.value[0])
          ...       == jax.random.key_data(rngs.default.key.value[4])).all())
          True

        Source: Flax NNX 0.12 ``Rngs.broadcast``.
        """
        return self._per_stream(k, "broadcast", RngStream.broadcast)

    def _per_stream(self, k: Any, what: str, make: Any) -> Rngs:
        rules = _rules(k, what)
        streams = {}
        for name, stream in self.items():
            shape = _first_match(rules, (name,), stream, None)
            streams[name] = stream if shape is None else make(stream, shape)
        return Rngs(**streams)


def _warn_fork_split(owner: str) -> None:
    warnings.warn(
        f"The 'split' argument of {owner}.fork is deprecated (as in Flax NNX 0.12.8); "
        f"use {owner}.split(...) instead.",
        DeprecationWarning,
        stacklevel=3,
    )


def _is_int(i: Any) -> bool:
    return isinstance(i, int) and not isinstance(i, bool)


def _is_shape(k: Any) -> bool:
    return _is_int(k) or (isinstance(k, tuple) and all(_is_int(i) for i in k))


def _rules(spec: Any, what: str) -> list[tuple[Any, Any, Any]]:
    """``spec`` (``None``, a shape, or a mapping ``{filter: value}``) as a list of
    ``(filter, predicate, value)`` in order.

    Raises:
      TypeError: ``spec`` is none of these, or a value is not a shape or ``None``.
    """
    if spec is None:
        return []
    if _is_shape(spec):
        spec = {...: spec}
    if not hasattr(spec, "items"):
        raise TypeError(
            f"{what} must be an int, a tuple of ints, or a mapping {{filter: shape}}; got "
            f"{type(spec).__name__} {spec!r}."
        )
    rules = []
    for filt, value in spec.items():
        if value is not None and not _is_shape(value):
            raise TypeError(
                f"{what}[{filt!r}] must be an int, a tuple of ints or None; got "
                f"{type(value).__name__} {value!r}."
            )
        rules.append((filt, to_predicate(filt), value))
    return rules


_NO_MATCH: Any = object()


def _first_match(rules: list[tuple[Any, Any, Any]], path: Any, value: Any, default: Any) -> Any:
    for _, predicate, shape in rules:
        if predicate(path, value):
            return shape
    return default


def reseed(
    node: Any,
    /,
    *,
    graph: bool | None = None,
    policy: str | Callable[[tuple[Any, ...], Any, tuple[int, ...]], Any] = "scalars_only",
    **stream_keys: Any,
) -> None:
    """Resets the streams named in ``stream_keys`` everywhere in ``node``: count back
    to zero and, as key, the next key of one fresh ``Rngs(name=seed)`` stream (the
    first such stream in walk order gets ``fold_in(key(seed), 0)``, the second
    ``fold_in(key(seed), 1)``...). The first is the key of a stream forked from a
    new ``Rngs(name=seed)``, so a layer that keeps ``rngs.dropout.fork()``
    (``nnx.Dropout``) repeats its draws, as in Flax NNX.

    Args:
      node: the object (Module, Rngs…) whose RNG streams to reseed.
      graph: ``False`` walks ``node`` in tree mode (a shared Variable is an error);
        ``None``: the default (``nnx.set_graph_mode``).
      policy: what to do with a stream whose key is not a scalar (a stream split by
        ``split_rngs``/``vmap``): ``'scalars_only'`` raises; ``'match_shape'`` splits
        the new key to that shape; a callable ``(path, key, shape) -> new_key`` decides.
      **stream_keys: stream name -> seed.

    Raises:
      ValueError: with ``'scalars_only'``, a stream's key has a shape; the message
        names the stream's path and the fix. Nothing is reseeded then.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> stream = nnx.Rngs(dropout=42).dropout.fork()   # as nnx.Dropout keeps it
      >>> first = stream()
      >>> nnx.reseed(stream, dropout=42)     # fold_in(key(42), 0) again, count 0
      >>> bool((jax.random.key_data(stream()) == jax.random.key_data(first)).all())
      True

    Source: Flax NNX 0.12 ``nnx.reseed``.
    """
    if not (policy in ("scalars_only", "match_shape") or callable(policy)):
        raise ValueError(
            f"nnx.reseed: unknown policy {policy!r}; use 'scalars_only', 'match_shape' or "
            "a callable (path, key, shape) -> new_key."
        )
    fresh = Rngs(**{name: _as_key(seed) for name, seed in stream_keys.items()})
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


class RngBackups:
    """What ``split_rngs``/``fork_rngs`` replaced, to put back with ``restore()``.

    Use it as a context manager (``with nnx.split_rngs(model, splits=4): ...``) or
    call ``restore_rngs(backups)``.
    """

    __slots__ = ("entries",)

    def __init__(self, entries: list[tuple[RngStream, Any, Any]]):
        self.entries = entries

    def restore(self) -> None:
        """Puts back every replaced key and count."""
        for stream, key, count in self.entries:
            stream.key.value = key
            stream.count.value = count

    def __enter__(self) -> RngBackups:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def restore_rngs(backups: RngBackups) -> None:
    """Puts back the keys that ``split_rngs``/``fork_rngs`` replaced."""
    backups.restore()


def _selected(node: Any, rules: list[tuple[Any, Any, Any]], only: Any) -> list[Any]:
    """``(path, stream, shape)`` for each stream of ``node`` (each once) that ``only``
    selects and some rule matches (first matching rule wins). Filters see the
    stream's key Variable at ``path + ('key',)``, as in Flax."""
    only_p = to_predicate(only)
    found = []
    for path, value in iter_graph(node):
        if not isinstance(value, RngStream):
            continue
        where, key = (*path, "key"), value.key
        if not only_p(where, key):
            continue
        shape = _first_match(rules, where, key, _NO_MATCH)
        if shape is not _NO_MATCH:
            found.append((path, value, shape))
    return found


def _in_place(node: Any, rules: list[tuple[Any, Any, Any]], only: Any, make: Any) -> RngBackups:
    """Replaces the selected streams' key (``make(stream(), shape)``) and count in place."""
    entries = []
    for _, stream, shape in _selected(node, rules, only):
        new_key = make(stream(), shape)  # consumes one key: every call splits afresh
        entries.append((stream, stream.key.value, stream.count.value))
        stream.key.value = new_key
        stream.count.value = jnp.zeros(new_key.shape, dtype=jnp.uint32)
    return RngBackups(entries)


def _copied(node: Any, rules: list[tuple[Any, Any, Any]], only: Any, make: Any, graph: bool) -> Any:
    """A copy of ``node`` (sharing its Variables) whose selected streams hold new key
    and count Variables; the originals' counts advance by one draw."""
    # Copied streams share their key Variable with the original: find them by it.
    chosen = {id(s.key): (s.key, shape) for _, s, shape in _selected(node, rules, only)}

    def f(path: Any, copy: Any) -> Any:
        entry = chosen.get(id(copy.key)) if isinstance(copy, RngStream) else None
        if entry is not None and entry[0] is copy.key:
            new_key = make(copy(), entry[1])  # advances the shared count Variable
            copy.key = RngKey(new_key, tag=copy.tag)
            copy.count = RngCount(jnp.zeros(new_key.shape, dtype=jnp.uint32), tag=copy.tag)
        return copy

    return copy_nodes(node, f, graph=graph)


def _rng_decorator(apply: Any, in_place: bool) -> Any:
    import functools

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


def _split_key(squeeze: bool) -> Any:
    def make(key: jax.Array, shape: Any) -> jax.Array:
        keys = jax.random.split(key, shape)
        return keys[0] if squeeze else keys

    return make


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

    if node is _MISSING:
        return _rng_decorator(apply, mode.updates)
    return apply(node)


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()


def split_rngs(
    node: Any = _MISSING,
    /,
    *,
    splits: int | tuple[int, ...],
    only: Any = ...,
    squeeze: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Replaces the keys of the RNG streams in ``node`` by ``splits`` split keys.

    Each selected stream draws one key (advancing its count, so every call splits
    afresh), splits it into ``splits`` keys and holds them, with a count of the
    same shape, until restored: vmapping or scanning over that axis then gives
    every slice its own random stream. With ``squeeze=True`` (``splits`` must be
    1) the split axis is dropped.

    In the default mode (``graph=True, graph_updates=True``) the streams of
    ``node`` are changed in place: the function form returns ``RngBackups``
    (``nnx.restore_rngs(backups)`` or ``with nnx.split_rngs(...):`` puts the keys
    back) and the decorator form (``@nnx.split_rngs(splits=10)`` over a transform)
    splits the streams found in the arguments before each call and restores them
    after. With ``graph_updates=False`` or ``graph=False``, ``node`` is left as it
    is (except that each selected stream's count advances by the key it gave) and
    a copy sharing its other Variables, holding the split streams, is returned
    (the decorator passes such copies of the arguments).

    Args:
      node: the graph holding ``Rngs``/``RngStream``s; omit it for the decorator form.
      splits: number (or shape) of keys.
      only: a filter selecting streams (e.g. ``'dropout'`` for one stream by tag);
        it sees each stream's key Variable at path ``(..., 'key')``.
      squeeze: drop the split axis (requires ``splits == 1``).
      graph: ``False`` for tree mode (a Variable reachable twice is an error);
        ``None``: ``nnx.set_graph_mode``'s default.
      graph_updates: ``False`` to return a copy instead of changing ``node``;
        ``None``: ``nnx.set_graph_updates``'s default.

    Returns:
      ``RngBackups`` (in place), a copy of ``node`` (copy modes), or a decorator.

    Raises:
      ValueError: ``squeeze`` with ``splits`` other than 1.
      SharedReferenceError (``ValueError``): tree mode and a Variable of ``node``
        reachable along several paths (the message lists them).

    Example::

      >>> import flaxgraph as nnx
      >>> rngs = nnx.Rngs(params=0, dropout=1)
      >>> new = nnx.split_rngs(rngs, splits=5, only='params', graph_updates=False)
      >>> new.params.key.shape, new.dropout.key.shape, rngs.params.key.shape
      ((5,), (), ())
      >>> with nnx.split_rngs(rngs, splits=3):
      ...   rngs.dropout.key.shape
      (3,)

    Source: Flax NNX 0.12 ``nnx.split_rngs`` (seed 003, "Random state").
    """
    if squeeze and splits != 1:
        raise ValueError(f"split_rngs(squeeze=True) needs splits=1, got splits={splits!r}.")
    rules = _rules(splits, "splits")
    return _apply_mode(node, rules, only, _split_key(squeeze), graph, graph_updates)


def fork_rngs(
    node: Any = _MISSING,
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
      split: ``None`` (fork every stream), an int or shape (fork every stream
        into that many keys), or a mapping ``{filter: shape or None}``: the streams
        the first matching filter selects are forked (``None``) or split into that
        shape; streams no filter selects are left alone.
      only: a filter further restricting the streams (flaxgraph extension; Flax
        0.12.8's ``fork_rngs`` has no ``only``).
      graph, graph_updates: as in ``split_rngs``.

    Returns:
      ``RngBackups`` (in place), a copy of ``node`` (copy modes), or a decorator.

    Raises:
      TypeError: ``split`` is not a shape, ``None`` or a mapping of them.
      SharedReferenceError (``ValueError``): tree mode and shared Variables.

    Example::

      >>> import flaxgraph as nnx
      >>> rngs = nnx.Rngs(params=0, dropout=1)
      >>> with nnx.fork_rngs(rngs, split={'params': 2}):
      ...   rngs.params.key.shape, int(rngs.dropout.count.value)
      ((2,), 0)

    Source: Flax NNX 0.12 ``nnx.fork_rngs``.
    """
    rules = _rules({...: None} if split is None else split, "split")
    return _apply_mode(node, rules, only, _fork_key, graph, graph_updates)
