"""Checkpoints of States as ``.npz`` files: ``save_state`` and ``load_state``.

A State is a nested mapping of path keys to Variables or arrays, so a
checkpoint is simply one array per path. ``save_state`` writes them with NumPy
(typed PRNG keys are stored as their raw key data and rebuilt on load);
``load_state`` reads them into the structure of a *target* State, usually
``nnx.state(fresh_model)`` or ``nnx.eval_shape``'s abstract one, checking that
paths, shapes and dtypes agree. Put the result back with ``nnx.update``::

  nnx.save_state('model.npz', nnx.state(model))
  fresh = Model(rngs=nnx.Rngs(1))
  nnx.update(fresh, nnx.load_state('model.npz', nnx.state(fresh)))

This is flaxgraph's own lightweight format (NumPy only). For large or sharded
models, orbax-checkpoint remains the ecosystem's tool; it accepts
``state.to_pure_dict()`` as is.
"""

from __future__ import annotations

import os
from collections.abc import Hashable

import jax
import jax.numpy as jnp
import numpy as np

from flaxgraph.errors import GraphStructureError
from flaxgraph.state import State
from flaxgraph.variables import Variable

_KEY_MARK = "#key:"


def _encode(path: tuple[Hashable, ...]) -> str:
    parts = []
    for k in path:
        if isinstance(k, bool) or not isinstance(k, (int, str)):
            raise TypeError(f"Cannot store a path key of type {type(k).__name__} ({k!r}).")
        if isinstance(k, str) and "/" in k:
            raise ValueError(f"Cannot store the path key {k!r}: it contains '/'.")
        parts.append(f"i{k}" if isinstance(k, int) else f"s{k}")
    return "/".join(parts)


def save_state(path: str | os.PathLike[str], state: State) -> None:
    """Writes every leaf of ``state`` to the ``.npz`` file ``path``.

    Args:
      path: the file to write (``.npz`` is appended by NumPy if missing).
      state: a State (from ``nnx.state``/``nnx.split``); its leaves are Variables
        or arrays of any shape and dtype, typed PRNG keys included.

    Raises:
      TypeError / ValueError: a path key is neither an int nor a string, or a
        string holds ``/``.

    Example::

      nnx.save_state('/tmp/ckpt.npz', nnx.state(model))
    """
    arrays: dict[str, np.ndarray] = {}
    for p, leaf in state.flat_state():
        value = leaf.raw_value if isinstance(leaf, Variable) else leaf
        name = _encode(p)
        if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
            impl = str(jax.random.key_impl(value))
            arrays[f"{name}{_KEY_MARK}{impl}"] = np.asarray(jax.random.key_data(value))
        else:
            arrays[name] = np.asarray(value)
    np.savez(path, **arrays)


def load_state(path: str | os.PathLike[str], target: State) -> State:
    """Reads the ``.npz`` file ``path`` into a State with the structure of ``target``.

    Args:
      path: a file written by ``save_state``.
      target: a State giving the expected paths, Variable kinds, metadata, shapes
        and dtypes (concrete, or abstract from ``nnx.eval_shape``).

    Returns:
      A new State like ``target`` holding the loaded arrays (``jax.Array``s).

    Raises:
      GraphStructureError (a ``ValueError``): the file lacks a path of ``target``,
        has paths ``target`` lacks, or an array's shape or dtype differs; the
        message names the paths.
    """
    with np.load(path) as data:
        stored = {}
        for name in data.files:
            base, _, impl = name.partition(_KEY_MARK)
            stored[base] = (data[name], impl or None)
    pairs = []
    problems = []
    expected = set()
    for p, leaf in target.flat_state():
        name = _encode(p)
        expected.add(name)
        if name not in stored:
            problems.append(f"missing {'/'.join(map(str, p))}")
            continue
        array, impl = stored[name]
        value = (
            jax.random.wrap_key_data(jnp.asarray(array), impl=impl) if impl else jnp.asarray(array)
        )
        like = leaf.raw_value if isinstance(leaf, Variable) else leaf
        shape, dtype = getattr(like, "shape", None), getattr(like, "dtype", None)
        if shape is not None and (tuple(shape) != tuple(value.shape) or dtype != value.dtype):
            problems.append(
                f"{'/'.join(map(str, p))}: stored {value.dtype}{list(value.shape)}, expected "
                f"{dtype}{list(shape)}"
            )
            continue
        pairs.append((p, leaf.replace(value) if isinstance(leaf, Variable) else value))
    extra = sorted(set(stored) - expected)
    if extra:
        problems.append(f"{len(extra)} stored arrays the target has no place for (e.g. {extra[0]})")
    if problems:
        raise GraphStructureError(
            f"The checkpoint {os.fspath(path)!r} does not match the target State: "
            + "; ".join(problems[:10])
            + (f" (and {len(problems) - 10} more)" if len(problems) > 10 else "")
            + ".\nFix: load into the State of a model built with the same configuration."
        )
    return State.from_flat_path(pairs)
