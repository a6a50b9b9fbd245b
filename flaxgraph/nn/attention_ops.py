"""Attention functions: ``dot_product_attention`` and attention masks.

Arrays are ``(*batch, length, num_heads, depth)``; masks are boolean-like, broadcastable
to the weights' ``(*batch, num_heads, q_length, kv_length)``.

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> q = k = v = jnp.ones((2, 5, 3, 4))             # (batch, length, heads, depth)
>>> mask = nnx.make_causal_mask(jnp.ones((2, 5)))
>>> mask.shape, nnx.dot_product_attention(q, k, v, mask=mask).shape
((2, 1, 5, 5), (2, 5, 3, 4))

Source: Flax NNX ``nnx.dot_product_attention``, ``dot_product_attention_weights``,
``make_attention_mask``, ``make_causal_mask``, ``combine_masks`` (0.12): signatures and
behaviour; ``jax.nn.dot_product_attention``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from flaxgraph.module_class import Module
from flaxgraph.nn.common import broadcast_right
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.errors import LayerShapeError, describe
from flaxgraph.variablelib.variable import Intermediate

Dtype = Any


def _check_qkv(query: jax.Array, key: jax.Array, value: jax.Array | None, module: Any) -> None:
    """Raises ``LayerShapeError`` naming every disagreement of the three shapes (Flax's phrases kept)."""
    who = describe(module) if module is not None else "dot_product_attention"
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}" + (
        "" if value is None else f", value {tuple(value.shape)}"
    )
    problems = []
    arrays = [query, key] + ([] if value is None else [value])
    if any(a.ndim < 3 for a in arrays) or len({a.ndim for a in arrays}) != 1:
        problems.append(
            "query, key and value must have same rank (>= 3, laid out "
            "(*batch, length, num_heads, depth))"
        )
    else:
        if any(a.shape[:-3] != query.shape[:-3] for a in arrays):
            problems.append("batch dims must match (the axes before -3)")
        q_heads = query.shape[-2]
        for name, a in (("key", key), ("value", value)):
            if a is not None and q_heads % a.shape[-2]:
                problems.append(
                    f"query heads ({q_heads}) must be a multiple of {name} heads "
                    f"({a.shape[-2]}) (grouped-query attention; axis -2)"
                )
        if query.shape[-1] != key.shape[-1]:
            problems.append("query and key depths must match (axis -1)")
        if value is not None and key.shape[-3] != value.shape[-3]:
            problems.append("key and value lengths must match (axis -3)")
    if problems:
        raise LayerShapeError(
            f"{who}: {'; '.join(problems)}; got {shapes}. Fix the shapes of the arrays passed in.",
            module,
        )


def _grouped(x: jax.Array, groups: int) -> jax.Array:
    """``(..., heads, d)`` -> ``(..., groups, heads // groups, d)``, grouped as in ``jax.nn``."""
    return jnp.reshape(x, (*x.shape[:-2], groups, x.shape[-2] // groups, x.shape[-1]))


def dot_product_attention_weights(
    query: jax.Array,
    key: jax.Array,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: jax.Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: Dtype | None = None,
    precision: Any = None,
    module: Module | None = None,
    promote_dtype: Callable[..., Any] = promote_dtype,
    is_causal: bool = False,
) -> jax.Array:
    """The attention weights ``softmax(q kᵀ / sqrt(depth) + bias)``, masked.

    Args:
      query: ``(*batch, q_length, num_heads, depth)``.
      key: ``(*batch, kv_length, num_kv_heads, depth)``; query head ``i`` uses key head
        ``i // (num_heads // num_kv_heads)``.
      bias: added to the logits; broadcastable to the weights (aligned right).
      mask: where false, the logit becomes the dtype's lowest value; broadcastable.
      broadcast_dropout: one dropout mask for every batch element and head.
      dropout_rng: the dropout key (needed when dropout applies).
      dropout_rate: the probability of dropping a weight.
      deterministic: no dropout.
      dtype: computation dtype (default: promoted from query and key).
      precision: the ``einsum`` precision.
      module: if given, the weights are sown into it as ``Intermediate`` ``attention_weights``.
      promote_dtype: the dtype promotion function.
      is_causal: also mask keys after the query position (top-left lower triangle).

    Returns:
      ``(*batch, num_heads, q_length, kv_length)`` weights summing to 1 over the last axis.

    Raises:
      LayerShapeError (a ``ValueError``): query and key disagree on rank, batch or depth,
        or the key heads do not divide the query heads.
      ValueError: dropout applies but ``dropout_rng`` is None.
    """
    query, key = promote_dtype((jnp.asarray(query), jnp.asarray(key)), dtype=dtype)
    _check_qkv(query, key, None, module)
    dtype = query.dtype
    q_heads, kv_heads = query.shape[-2], key.shape[-2]
    grouped = kv_heads != q_heads
    if grouped:  # grouped-query attention: each key head serves q_heads // kv_heads query heads
        query = _grouped(query, kv_heads)
        key = jnp.expand_dims(key, -2)
    query = query / jnp.sqrt(query.shape[-1]).astype(dtype)
    # grouped: the key's inserted size-1 axis ``z`` is summed away inside the einsum
    spec = "...qhgd,...khzd->...hgqk" if grouped else "...qhd,...khd->...hqk"
    weights = jnp.einsum(spec, query, key, precision=precision)
    if grouped:
        weights = jnp.reshape(weights, (*weights.shape[:-4], q_heads, *weights.shape[-2:]))
    if bias is not None:
        weights = weights + broadcast_right(jnp.asarray(bias), weights.ndim)
    if mask is not None or is_causal:
        masks = [] if mask is None else [broadcast_right(jnp.asarray(mask), weights.ndim)]
        if is_causal:
            q_len, kv_len = weights.shape[-2:]
            causal = jnp.tril(jnp.ones((q_len, kv_len), dtype=dtype))
            masks.append(jnp.broadcast_to(causal, masks[0].shape if masks else weights.shape))
        combined = combine_masks(*masks, dtype=dtype)
        assert combined is not None  # at least one mask
        weights = jnp.where(combined, weights, jnp.finfo(dtype).min)
    weights = jax.nn.softmax(weights).astype(dtype)
    if module is not None:
        module.sow(Intermediate, "attention_weights", weights)
    if not deterministic and dropout_rate > 0.0:
        if dropout_rng is None:
            raise ValueError(
                "dot_product_attention: dropout_rate > 0 and not deterministic, "
                "but no dropout_rng was given."
            )
        keep = 1.0 - dropout_rate
        shape = (
            (1,) * (weights.ndim - 2) + weights.shape[-2:] if broadcast_dropout else weights.shape
        )
        kept = jax.random.bernoulli(dropout_rng, keep, shape)
        weights = weights * (kept.astype(dtype) / jnp.asarray(keep, dtype))
    return weights


def dot_product_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: jax.Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: Dtype | None = None,
    precision: Any = None,
    module: Module | None = None,
    promote_dtype: Callable[..., Any] = promote_dtype,
    is_causal: bool = False,
) -> jax.Array:
    """Scaled dot-product attention: ``softmax(q kᵀ / sqrt(depth)) v`` per head.

    Without dropout and ``module`` it is ``jax.nn.dot_product_attention`` (no
    ``precision``, as in Flax NNX 0.12.8); otherwise the weights contract with ``value``.

    Args:
      query: ``(*batch, q_length, num_heads, depth)``.
      key: ``(*batch, kv_length, num_kv_heads, depth)``.
      value: ``(*batch, kv_length, num_kv_heads, v_depth)``.
      bias, mask, broadcast_dropout, dropout_rng, dropout_rate, deterministic, dtype,
        precision, module, promote_dtype, is_causal: as in ``dot_product_attention_weights``.

    Returns:
      ``(*batch, q_length, num_heads, v_depth)``.

    Raises:
      LayerShapeError (a ``ValueError``): the arrays disagree on rank, batch, depth or
        length, or the key/value heads do not divide the query heads.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> q = k = v = jnp.ones((2, 4, 3, 8))
    >>> nnx.dot_product_attention(q, k, v).shape
    (2, 4, 3, 8)
    """
    query, key, value = promote_dtype(
        (jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)), dtype=dtype
    )
    _check_qkv(query, key, value, module)
    if dropout_rate == 0.0 and module is None and value.shape[-1] == query.shape[-1]:
        # no dropout and no sown weights: JAX's fused attention (which takes no
        # precision), on rank-4 arrays, as Flax NNX does. (It needs one depth for
        # queries and values, where Flax's raises; other depths take the einsums.)
        return _fused_attention(query, key, value, bias, mask, is_causal)
    weights = dot_product_attention_weights(
        query,
        key,
        bias,
        mask,
        broadcast_dropout,
        dropout_rng,
        dropout_rate,
        deterministic,
        query.dtype,
        precision,
        module,
        promote_dtype,
        is_causal,
    )
    q_heads, v_heads = weights.shape[-3], value.shape[-2]
    if v_heads == q_heads:
        return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)
    grouped = jnp.reshape(weights, (*weights.shape[:-3], v_heads, -1, *weights.shape[-2:]))
    value = jnp.expand_dims(value, -2)
    out = jnp.einsum("...hgqk,...khzd->...qhgd", grouped, value, precision=precision)
    return jnp.reshape(out, (*out.shape[:-3], q_heads, out.shape[-1]))


def _fused_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    bias: jax.Array | None,
    mask: jax.Array | None,
    is_causal: bool,
) -> jax.Array:
    """``jax.nn.dot_product_attention`` over any number of batch axes, the mask as booleans."""
    shape = query.shape
    if len(shape) > 4:

        def flat(x: jax.Array) -> jax.Array:
            return jnp.reshape(x, (math.prod(x.shape[:-3]), *x.shape[-3:]))

        query, key, value = flat(query), flat(key), flat(value)
        bias = None if bias is None else flat(jnp.asarray(bias))
        mask = None if mask is None else flat(jnp.asarray(mask))
    if mask is not None:
        mask = jnp.asarray(mask).astype(jnp.bool_)
    out = jax.nn.dot_product_attention(query, key, value, bias, mask, is_causal=is_causal)
    return jnp.reshape(out, shape) if len(shape) > 4 else out


def make_attention_mask(
    query_input: jax.Array,
    key_input: jax.Array,
    pairwise_fn: Callable[..., Any] = jnp.multiply,
    extra_batch_dims: int = 0,
    dtype: Dtype = jnp.float32,
) -> jax.Array:
    """A mask from per-position values: ``mask[..., 0, i, j] = pairwise_fn(query_input[..., i], key_input[..., j])``.

    Args:
      query_input: ``(*batch, q_length)``, e.g. 1 for real tokens, 0 for padding.
      key_input: ``(*batch, kv_length)``.
      pairwise_fn: combines a query and a key value (default ``jnp.multiply``).
      extra_batch_dims: leading size-1 axes to add.
      dtype: the mask's dtype.

    Returns:
      ``(*[1] * extra_batch_dims, *batch, 1, q_length, kv_length)``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> nnx.make_attention_mask(jnp.array([1, 1, 0]), jnp.array([1, 0, 0])).shape
    (1, 3, 3)
    """
    mask = pairwise_fn(jnp.expand_dims(query_input, -1), jnp.expand_dims(key_input, -2))
    mask = jnp.expand_dims(mask, -3)
    mask = jnp.reshape(mask, (1,) * extra_batch_dims + mask.shape)
    return mask.astype(dtype)


def make_causal_mask(
    x: jax.Array, extra_batch_dims: int = 0, dtype: Dtype = jnp.float32
) -> jax.Array:
    """The causal mask for self-attention over ``x`` of shape ``(*batch, length)``:
    position ``i`` may attend to ``j <= i``.

    Returns:
      ``(*[1] * extra_batch_dims, *batch, 1, length, length)``.
    """
    x = jnp.asarray(x)
    idxs = jnp.broadcast_to(jnp.arange(x.shape[-1], dtype=jnp.int32), x.shape)
    return make_attention_mask(idxs, idxs, jnp.greater_equal, extra_batch_dims, dtype)


def combine_masks(*masks: jax.Array | None, dtype: Dtype = jnp.float32) -> jax.Array | None:
    """The logical AND of the masks that are not None (None if all are).

    Raises:
      ValueError: the masks have different ranks.
    """
    present = [jnp.asarray(m) for m in masks if m is not None]
    if not present:
        return None
    if len({m.ndim for m in present}) != 1:
        raise ValueError(
            f"combine_masks: masks must have one rank, got shapes {[tuple(m.shape) for m in present]}."
        )
    return functools.reduce(jnp.logical_and, present).astype(dtype)


__all__ = [
    "combine_masks",
    "dot_product_attention",
    "dot_product_attention_weights",
    "make_attention_mask",
    "make_causal_mask",
]
