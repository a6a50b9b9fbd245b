"""Random streams as ordinary state: ``Rngs``, ``RngStream`` and their Variables.

Calling a stream returns ``fold_in(key, count)`` and increments ``count``; each
Variable carries its stream's name as ``tag`` metadata. See the package README.

Source: Flax NNX ``nnx.Rngs``, ``RngStream``, ``RngState``/``RngKey``/``RngCount``
(0.12), including ``fork``, ``split``, ``broadcast``.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp

from flaxgraph.filterlib import to_predicate
from flaxgraph.module_class import Module
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.rnglib.samplers import RandomSamplers
from flaxgraph.variablelib.variable import Variable


class RngState(Variable[jax.Array]):
    """Base kind of the Variables that hold random state."""


class RngKey(RngState):
    """A stream's JAX key (typed key array)."""


class RngCount(RngState):
    """How many keys a stream has produced (uint32, same shape as its key)."""


def as_key(seed: Any) -> jax.Array:
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
    if seed.dtype == jnp.uint32 and seed.ndim >= 1:
        # Raw key data of the default PRNG implementation (uint32[2] threefry2x32, uint32[4]
        # rbg/unsafe_rbg); another trailing shape is integers, handled below.
        try:
            return jax.random.wrap_key_data(seed)
        except (TypeError, ValueError):
            pass
    if jnp.issubdtype(seed.dtype, jnp.integer):
        return jax.random.key(seed) if seed.ndim == 0 else jax.vmap(jax.random.key)(seed)
    raise TypeError(
        f"Cannot make a random key from {type(seed).__name__} of dtype {seed.dtype}; pass an "
        "int seed or a key from jax.random.key."
    )


class RngStream(Pytree, RandomSamplers):
    """One named stream of random keys.

    Args:
      key: an int, a typed key (``jax.random.key``), raw key data of the default PRNG
        implementation (one key of shape ``()``, as ``jax.random.wrap_key_data`` makes),
        or an array of these (one stream per element, e.g. for ``vmap``).
      tag: the stream's name, stored as the Variables' ``tag`` metadata.
    """

    def __init__(self, key: Any, *, tag: str):
        key = as_key(key)
        self.key = RngKey(key, tag=tag)
        self.count = RngCount(jnp.zeros(key.shape, dtype=jnp.uint32), tag=tag)
        self.tag = tag

    def __call__(self) -> jax.Array:
        self.count._check_settable()  # before touching values of another trace
        key = jax.random.fold_in(self.key.value, self.count.value)
        self.count.value = self.count.value + 1
        return key

    def fork(self, *, split: int | tuple[int, ...] | None = None) -> RngStream:
        """A new, independent stream made from one key of this one.

        ``split`` (deprecated, as in Flax NNX 0.12.8): ``split(k)`` with a ``DeprecationWarning``.
        """
        if split is not None:
            _warn_fork_split("RngStream")
            return self.split(split)
        return RngStream(self(), tag=self.tag)

    def split(self, k: int | tuple[int, ...]) -> RngStream:
        """A new stream of ``k`` independent keys (shape ``k + key.shape``); draws one key."""
        return RngStream(jax.random.split(self(), k), tag=self.tag)

    def broadcast(self, k: int | tuple[int, ...]) -> RngStream:
        """A new stream of one fresh key repeated to shape ``k + key.shape``; draws one key."""
        key = self()
        shape = (k,) if isinstance(k, int) else tuple(k)
        return RngStream(jnp.broadcast_to(key, shape + key.shape), tag=self.tag)


class Rngs(Module, RandomSamplers):
    """Named random streams.

    Args:
      default: the key (or int) of the ``default`` stream, used by any name without a
        stream of its own; optional.
      **streams: ``name=key`` for each stream (``params=0, dropout=1``).

    Raises:
      AttributeError: ``rngs.name`` for a missing stream without ``default``
        (``KeyError`` for ``rngs['name']``).

    >>> import jax, flaxgraph as nnx
    >>> rngs = nnx.Rngs(0, dropout=1)    # a 'default' stream and a 'dropout' stream
    >>> k1, k2 = rngs.params(), rngs.params()   # no 'params' stream: uses 'default'
    >>> bool((jax.random.key_data(k1) != jax.random.key_data(k2)).any())
    True
    >>> int(rngs.default.count.value)
    2
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
            return streams[name]
        if "default" in streams:
            return streams["default"]
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

        ``split`` (deprecated, with a ``DeprecationWarning``): a shape or ``{filter: shape or
        None}``; the streams it matches are split, the others forked.

        >>> import flaxgraph as nnx
        >>> rngs = nnx.Rngs(params=1, dropout=2)
        >>> new = rngs.fork()
        >>> int(rngs.params.count.value), int(new.params.count.value)
        (1, 0)
        """
        if split is not None:
            _warn_fork_split("Rngs")
        return self._per_stream(split, "split", RngStream.split, RngStream.fork)

    def split(self, k: Any) -> Rngs:
        """A new Rngs whose streams hold ``k`` keys each (``RngStream.split``).

        Args:
          k: a shape for every stream, or ``{filter: shape or None}`` (first match wins;
            ``None`` or no match keeps the same ``RngStream``).

        >>> import flaxgraph as nnx
        >>> rngs = nnx.Rngs(params=1, dropout=2).split({'params': 5, ...: None})
        >>> rngs.params.key.shape, rngs.dropout.key.shape
        ((5,), ())
        """
        return self._per_stream(k, "split", RngStream.split, lambda s: s)

    def broadcast(self, k: Any) -> Rngs:
        """A new Rngs whose selected streams hold one fresh key repeated to shape ``k``.

        Args:
          k: as in ``split``; ``None`` selects no stream.

        >>> import flaxgraph as nnx
        >>> nnx.Rngs(0).broadcast(5).default.key.shape
        (5,)
        """
        return self._per_stream(k, "broadcast", RngStream.broadcast, lambda s: s)

    def _per_stream(self, k: Any, what: str, make: Any, unmatched: Any) -> Rngs:
        rules = rule_list(k, what)
        streams = {}
        for name, stream in self.items():
            shape = first_match(rules, (name,), stream, None)
            streams[name] = unmatched(stream) if shape is None else make(stream, shape)
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


def rule_list(spec: Any, what: str) -> list[tuple[Any, Any, Any]]:
    """``spec`` (``None``, a shape, or ``{filter: shape or None}``) as ``(filter, predicate, value)``
    triples in order; ``TypeError`` for anything else."""
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


NO_MATCH: Any = object()


def first_match(rules: list[tuple[Any, Any, Any]], path: Any, value: Any, default: Any) -> Any:
    for _, predicate, shape in rules:
        if predicate(path, value):
            return shape
    return default
