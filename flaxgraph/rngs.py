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

from typing import Any

import jax
import jax.numpy as jnp

from flaxgraph.graph.traversal import iter_graph
from flaxgraph.module import Module
from flaxgraph.objects import Pytree
from flaxgraph.variables import Variable


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


class RngStream(Pytree):
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
        key = jax.random.fold_in(self.key.value, self.count.value)
        self.count.value = self.count.value + 1
        return key

    def fork(self, *, split: int | tuple[int, ...] | None = None) -> RngStream:
        """A new, independent stream seeded from this one (with ``split``, a stream of
        ``split`` keys, e.g. to ``vmap`` over)."""
        key = self()
        if split is not None:
            key = jax.random.split(key, split)
        return RngStream(key, tag=self.tag)


class Rngs(Module):
    """Named random streams (see the module docstring).

    Args:
      default: the seed of the ``default`` stream, used by any stream name that has
        no stream of its own; optional.
      **streams: ``name=seed`` for each stream (``params=0, dropout=1``).

    Raises:
      AttributeError: a stream is requested that does not exist and there is no
        ``default`` stream.

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
        streams = self.__dict__
        if "default" in streams:
            return streams["default"]  # type: ignore[no-any-return]
        raise AttributeError(
            f"Rngs has no stream {name!r} and no 'default' stream; streams are "
            f"{sorted(streams)}. Create it with nnx.Rngs({name}=seed) or give a default "
            "seed: nnx.Rngs(0)."
        )

    def __getitem__(self, name: str) -> RngStream:
        return getattr(self, name)  # type: ignore[no-any-return]

    def __contains__(self, name: str) -> bool:
        return name in self.__dict__

    def __call__(self) -> jax.Array:
        return self.default()

    def items(self) -> list[tuple[str, RngStream]]:
        """The ``(name, RngStream)`` pairs, sorted by name."""
        return [(n, s) for n, s in sorted(self.__dict__.items()) if isinstance(s, RngStream)]

    def fork(self, *, split: int | tuple[int, ...] | None = None) -> Rngs:
        """A new Rngs whose streams are forked from these (each advances by one)."""
        return Rngs(**{name: stream.fork(split=split) for name, stream in self.items()})


def reseed(node: Any, /, **stream_seeds: Any) -> None:
    """Resets the streams named in ``stream_seeds`` everywhere in ``node``: new key
    from the seed, count back to zero.

    Example: ``nnx.reseed(model, dropout=42)``.

    Source: Flax NNX ``nnx.reseed``.
    """
    for _, value in iter_graph(node):
        if isinstance(value, RngStream) and value.tag in stream_seeds:
            key = _as_key(stream_seeds[value.tag])
            value.key.value = key
            value.count.value = jnp.zeros(key.shape, dtype=jnp.uint32)


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


def _streams(node: Any, only: Any) -> list[RngStream]:
    from flaxgraph.filters import to_predicate

    predicate = to_predicate(only)
    return [
        value
        for path, value in iter_graph(node)
        if isinstance(value, RngStream) and predicate((*path, "key"), value.key)
    ]


def _replace_keys(node: Any, only: Any, make: Any) -> RngBackups:
    entries = []
    for stream in _streams(node, only):
        new_key = make(stream())  # consumes one key: every call splits afresh
        entries.append((stream, stream.key.value, stream.count.value))
        stream.key.value = new_key
        stream.count.value = jnp.zeros(new_key.shape, dtype=jnp.uint32)
    return RngBackups(entries)


def _rng_decorator(apply: Any) -> Any:
    import functools

    def decorator(f: Any) -> Any:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with apply((args, kwargs)):
                return f(*args, **kwargs)

        return wrapper

    return decorator


def split_rngs(
    node: Any = None,
    /,
    *,
    splits: int | tuple[int, ...],
    only: Any = ...,
    squeeze: bool = False,
) -> Any:
    """Replaces the keys of the RNG streams in ``node`` by ``splits`` split keys.

    Each selected stream draws one key (advancing its count, so every call splits
    afresh), splits it into ``splits`` keys and holds them, with a count of the
    same shape, until restored: vmapping or scanning over that axis then gives
    every slice its own random stream. With ``squeeze=True`` (``splits`` must be
    1) the split axis is dropped.

    Use as a function (``backups = nnx.split_rngs(model, splits=4)``, then
    ``nnx.restore_rngs(backups)``, or ``with nnx.split_rngs(...)``), or as a
    decorator (``@nnx.split_rngs(splits=10)`` over a transform: the streams found in
    the arguments are split before each call and restored after).

    Args:
      node: the graph holding ``Rngs``/``RngStream``s; omit it for the decorator form.
      splits: number (or shape) of keys.
      only: a filter selecting streams (e.g. ``'dropout'`` for one stream by tag).
      squeeze: drop the split axis (requires ``splits == 1``).

    Returns:
      ``RngBackups`` (function form) or a decorator.

    Raises:
      ValueError: ``squeeze`` with ``splits`` other than 1.

    Source: Flax NNX ``nnx.split_rngs`` (seed 003, "Random state").
    """
    if squeeze and splits != 1:
        raise ValueError(f"split_rngs(squeeze=True) needs splits=1, got splits={splits!r}.")

    def make(key: jax.Array) -> jax.Array:
        keys = jax.random.split(key, splits)
        return keys[0] if squeeze else keys

    def apply(target: Any) -> RngBackups:
        return _replace_keys(target, only, make)

    if node is None:
        return _rng_decorator(apply)
    return apply(node)


def fork_rngs(
    node: Any = None, /, *, split: int | tuple[int, ...] | None = None, only: Any = ...
) -> Any:
    """Gives the RNG streams in ``node`` fresh independent keys (split into ``split``
    keys if given) until restored; function or decorator, like ``split_rngs``.

    Source: Flax NNX ``nnx.fork_rngs``.
    """

    def make(key: jax.Array) -> jax.Array:
        return key if split is None else jax.random.split(key, split)

    def apply(target: Any) -> RngBackups:
        return _replace_keys(target, only, make)

    if node is None:
        return _rng_decorator(apply)
    return apply(node)
