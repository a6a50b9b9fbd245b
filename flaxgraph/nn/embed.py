"""``Embed``: a lookup table from integer ids to feature vectors.

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> embed = nnx.Embed(10, 4, rngs=nnx.Rngs(0))
>>> embed(jnp.array([[1, 2, 3]])).shape, embed.attend(jnp.ones((2, 4))).shape
((1, 3, 4), (2, 10))

Source: Flax NNX ``nnx.Embed`` (0.12); the lookup is ``jnp.take``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from flaxgraph.module_class import Module
from flaxgraph.nn.common import EMPTY_METADATA, make_param, op_options
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.errors import LayerDtypeError, check_last_dim, describe
from flaxgraph.nn.initializers import variance_scaling
from flaxgraph.rnglib.rngs import Rngs

default_embed_init = variance_scaling(1.0, "fan_in", "normal", out_axis=0)

Dtype = Any


class Embed(Module):
    """An embedding table: an ``embedding`` Param of shape ``(num_embeddings, features)``.

    Args:
      num_embeddings: the number of rows (the vocabulary size).
      features: the size of each embedding vector.
      dtype: dtype of the looked-up rows and of ``attend`` (default: the table's, promoted
        with the query in ``attend``).
      param_dtype: the table's dtype (default ``float32``).
      embedding_init: the table's initializer (default
        ``variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)``).
      promote_dtype: the dtype promotion function.
      rngs: ``nnx.Rngs`` (its ``params`` stream).
      embedding_metadata: metadata of the ``embedding`` Param.

    Call: integer ``inputs`` of shape ``S`` (and ``out_sharding``); returns ``S +
    (features,)``. An id outside ``[0, num_embeddings)`` gives NaNs (``jnp.take``'s
    ``'fill'``); a one-row table is broadcast to every id, as in Flax.

    Raises:
      LayerDtypeError (a ``ValueError`` and ``TypeError``): non-integer inputs.
      LayerShapeError: in ``attend``, a query whose last axis is not ``features``.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("num_embeddings", "features")

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        embedding_init: Callable[..., Any] = default_embed_init,
        promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
        embedding_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        self.embedding = make_param(
            embedding_init,
            rngs.params(),
            (num_embeddings, features),
            param_dtype,
            embedding_metadata,
        )
        self.num_embeddings = num_embeddings
        self.features = features
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        ids = jnp.asarray(inputs)
        if not jnp.issubdtype(ids.dtype, jnp.integer):
            raise LayerDtypeError(
                f"{describe(self)} expected integer ids, got dtype {ids.dtype} (shape "
                f"{tuple(ids.shape)}). Cast them with .astype(jnp.int32).",
                self,
            )
        (embedding,) = self.promote_dtype((self.embedding[...],), dtype=self.dtype, inexact=False)
        if embedding.shape[0] == 1:
            # a one-row table is broadcast whatever the ids (as Flax and Linen do)
            return jnp.broadcast_to(embedding, (*ids.shape, embedding.shape[1]))
        if out_sharding is None:
            return jnp.take(embedding, ids, axis=0, mode="fill")
        return embedding.at[ids].get(mode="fill", out_sharding=out_sharding)

    def attend(self, query: jax.Array, out_sharding: Any = None) -> jax.Array:
        """Logits of ``query`` ``(..., features)`` against every row: ``(..., num_embeddings)``.

        ``out_sharding`` is passed to ``jnp.dot``. Raises ``LayerShapeError`` if the query's last
        axis is not ``features``.
        """
        q = jnp.asarray(query)
        table = self.embedding[...]
        check_last_dim(self, q, table.shape[-1], "a query")
        q, embedding = self.promote_dtype((q, table), dtype=self.dtype)
        return jnp.dot(q, embedding.T, **op_options(out_sharding=out_sharding))
