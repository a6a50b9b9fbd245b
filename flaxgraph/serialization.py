"""Checkpoints through orbax-checkpoint (``flaxgraph[checkpoint]``), with path-naming checks
before a restore. orbax saves ``nnx.state(model)`` as it is; using orbax directly is in
``guides/distributed.md``, "Checkpoints with orbax".

Source: Flax NNX 0.12 checkpointing guide; orbax-checkpoint 0.12 (``StandardCheckpointer``)."""

from __future__ import annotations

import os
from collections.abc import Hashable
from typing import Any

import jax
import numpy as np

from flaxgraph.errors import MAX_LISTED, GraphStructureError
from flaxgraph.graphlib.paths import keys_str

__all__ = ["check_checkpoint", "load_state", "save_state"]


def _orbax() -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "flaxgraph checkpoints use orbax-checkpoint, which is not installed.\n"
            "Fix: pip install 'flaxgraph[checkpoint]' (or pip install orbax-checkpoint)."
        ) from e
    return ocp


def _key_name(k: Any) -> Hashable:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return getattr(k, attr)
    return k


def _flat(tree: Any) -> dict[tuple[str, ...], Any]:
    """``{path of str keys: leaf}`` of a pytree (a Variable's ``value`` key kept)."""
    pairs, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {tuple(str(_key_name(k)) for k in path): leaf for path, leaf in pairs}


def _variable_path(path: tuple[str, ...]) -> str:
    return keys_str(path[:-1] if path and path[-1] == "value" else path)


def _shape_dtype(x: Any) -> tuple[tuple[int, ...], np.dtype[Any]] | None:
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        return None
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        # orbax stores a typed key array as its raw key data
        data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(shape, dtype))
        shape, dtype = data.shape, data.dtype
    return tuple(shape), np.dtype(dtype)


def _fmt(sd: tuple[tuple[int, ...], np.dtype[Any]]) -> str:
    return f"{sd[1]}{list(sd[0])}"


def _metadata_tree(checkpoint: Any) -> Any:
    if isinstance(checkpoint, (str, os.PathLike)):
        ocp = _orbax()
        with ocp.StandardCheckpointer() as ckpt:
            checkpoint = ckpt.metadata(os.path.abspath(os.fspath(checkpoint)))
    checkpoint = getattr(checkpoint, "item_metadata", checkpoint)  # StepMetadata
    return getattr(checkpoint, "tree", checkpoint)  # TreeMetadata


def check_checkpoint(checkpoint: Any, target: Any, *, name: str | None = None) -> None:
    """Checks that a checkpoint holds exactly the paths, shapes and dtypes of ``target``.

    Args:
      checkpoint: a checkpoint directory (``StandardCheckpointer``/``save_state``), or
        orbax's metadata for one (``StandardCheckpointer().metadata(path)``,
        ``CheckpointManager.item_metadata(step)``, or its ``.tree``).
      target: the State (or pytree) that will receive it, concrete or abstract.
      name: how the checkpoint is called in the message (default: the directory).

    Raises:
      GraphStructureError (a ``ValueError``): a path is missing on either side, or a shape
        or dtype differs; the message lists each path with both values
        (``l/kernel: stored float32[3, 4], expected float32[4, 4]``).

    Example::

      >>> import tempfile, os, jax.numpy as jnp, flaxgraph as nnx
      >>> path = os.path.join(tempfile.mkdtemp(), 'ckpt')
      >>> nnx.save_state(path, nnx.State({'w': nnx.Param(jnp.ones(3))}))
      >>> nnx.check_checkpoint(path, nnx.State({'w': nnx.Param(jnp.ones(4))}))
      Traceback (most recent call last):
      ...
      flaxgraph.errors.GraphStructureError: The checkpoint '...ckpt' does not match the target State: w: stored float32[3], expected float32[4].
      ...
    """
    where = name or (
        os.fspath(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) else "checkpoint"
    )
    stored = _flat(_metadata_tree(checkpoint))
    expected = _flat(target)
    problems = []
    for path, leaf in expected.items():
        if path not in stored:
            problems.append(f"missing {_variable_path(path)} (the checkpoint has no such entry)")
            continue
        want, have = _shape_dtype(leaf), _shape_dtype(stored[path])
        if want is not None and have is not None and want != have:
            problems.append(f"{_variable_path(path)}: stored {_fmt(have)}, expected {_fmt(want)}")
    extra = [p for p in stored if p not in expected]
    problems += [f"unexpected {_variable_path(p)} (the target has no place for it)" for p in extra]
    if problems:
        listed = problems[:MAX_LISTED]
        more = len(problems) - len(listed)
        raise GraphStructureError(
            f"The checkpoint {where!r} does not match the target State: "
            + "; ".join(listed)
            + (f" (and {more} more)" if more else "")
            + ".\nFix: restore into the State of a model built with the same configuration "
            "(nnx.state(Model(...)) or nnx.get_abstract_model(...)); to restore a part, "
            "filter the target and pass orbax partial_restore=True."
        )


def _abstract(leaf: Any) -> Any:
    if isinstance(leaf, jax.Array):
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
    return leaf


def save_state(directory: str | os.PathLike[str], state: Any, *, force: bool = False) -> None:
    """Writes ``state`` to the checkpoint directory ``directory`` with orbax's ``save``.

    Args:
      directory: the directory to create (made absolute, as orbax requires).
      state: a State or any pytree of arrays, sharded ones included (under
        ``jax.distributed`` every process calls this and writes its shards).
      force: overwrite an existing directory.

    Raises:
      ValueError: ``directory`` exists and ``force`` is False (from orbax).
      ImportError: orbax-checkpoint is not installed.

    Example::

      >>> import tempfile, os, jax.numpy as jnp, flaxgraph as nnx
      >>> path = os.path.join(tempfile.mkdtemp(), 'ckpt')
      >>> nnx.save_state(path, nnx.State({'w': nnx.Param(jnp.ones(3))}))
      >>> nnx.load_state(path, nnx.State({'w': nnx.Param(jnp.zeros(3))}))['w'].value
      Array([1., 1., 1.], dtype=float32)
    """
    ocp = _orbax()
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(os.path.abspath(os.fspath(directory)), state, force=force)
        ckpt.wait_until_finished()


def load_state(directory: str | os.PathLike[str], target: Any) -> Any:
    """Reads the checkpoint ``directory`` into a new State like ``target``, after
    ``check_checkpoint``.

    Args:
      directory: a checkpoint written by ``save_state`` or ``StandardCheckpointer``.
      target: the State giving paths, kinds, metadata, shapes, dtypes and shardings:
        concrete, or abstract (``nnx.get_abstract_model(init_fn, mesh)[1]``: restored
        straight onto the mesh, each process reading its shards).

    Returns:
      A new State (``target`` is unchanged); ``nnx.update(model, state)`` puts it in.

    Raises:
      GraphStructureError (a ``ValueError``): paths, shapes or dtypes disagree; nothing
        is read.
      ImportError: orbax-checkpoint is not installed.
    """
    ocp = _orbax()
    path = os.path.abspath(os.fspath(directory))
    with ocp.StandardCheckpointer() as ckpt:
        check_checkpoint(ckpt.metadata(path), target, name=os.fspath(directory))
        abstract = jax.tree.map(_abstract, target)
        return ckpt.restore(path, abstract)
