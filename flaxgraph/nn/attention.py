"""Attention: ``MultiHeadAttention``, with an optional autoregressive cache.

See the package README, "Attention".

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> mha = nnx.MultiHeadAttention(num_heads=2, in_features=8, rngs=nnx.Rngs(0))
>>> mha(jnp.ones((3, 5, 8)), mask=nnx.make_causal_mask(jnp.ones((3, 5)))).shape
(3, 5, 8)

Source: Flax NNX ``nnx.MultiHeadAttention`` (0.12): signature and behaviour; Vaswani et
al., "Attention Is All You Need" (2017).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax import lax

from flaxgraph.module_class import Module
from flaxgraph.nn.attention_ops import (
    combine_masks,
    dot_product_attention,
    dot_product_attention_weights,
    make_attention_mask,
    make_causal_mask,
)
from flaxgraph.nn.common import EMPTY_METADATA, first_from
from flaxgraph.nn.dtypes import promote_dtype
from flaxgraph.nn.errors import check_last_dim, describe, shape_error
from flaxgraph.nn.initializers import lecun_normal, zeros
from flaxgraph.nn.linear import LinearGeneral
from flaxgraph.nn.normalization import LayerNorm
from flaxgraph.nn.stochastic import draw_key, own_stream
from flaxgraph.rnglib.rngs import Rngs, RngStream
from flaxgraph.typing import DotGeneralT as DotGeneralT
from flaxgraph.typing import PrecisionLike as PrecisionLike
from flaxgraph.typing import PromoteDtypeFn as PromoteDtypeFn
from flaxgraph.typing import Shape as Shape
from flaxgraph.variablelib.variable import Cache

Dtype = Any
Initializer = Callable[..., Any]
Array = jax.Array

default_kernel_init = lecun_normal()


def _validate_qkv_shapes(query: jax.Array, key: jax.Array, value: jax.Array | None = None) -> None:
    """Raises ``ValueError`` unless ``query``, ``key`` (and ``value``) share rank and batch axes (Flax's private name)."""
    arrays = [query, key] + ([] if value is None else [value])
    names = "q, k" if value is None else "q, k, v"
    if len({a.ndim for a in arrays}) != 1:
        ranks = ", ".join(str(a.ndim) for a in arrays)
        raise ValueError(f"{names} must have same rank, but got {ranks}.")
    if any(a.shape[:-3] != query.shape[:-3] for a in arrays):
        shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
        raise ValueError(
            f"{names} batch dims must match (the axes before the last three), but got "
            f"shapes {shapes}."
        )


def _check_heads(qkv_features: int, num_heads: int, num_kv_heads: int) -> None:
    """Raises ``ValueError`` unless the features split into heads and query heads into key/value heads."""
    if qkv_features % num_heads:
        raise ValueError(
            f"MultiHeadAttention: qkv_features ({qkv_features}) must be divisible by "
            f"num_heads ({num_heads})."
        )
    if num_heads % num_kv_heads:
        raise ValueError(
            f"MultiHeadAttention: num_heads ({num_heads}) must be divisible by num_kv_heads "
            f"({num_kv_heads})."
        )


def _decode_step(
    module: Any, inputs_k: jax.Array, key: jax.Array, value: jax.Array, mask: jax.Array | None
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """One decoding step: writes ``key``/``value`` at ``cache_index``, advances it, returns caches and mask."""
    if module.cached_key is None or module.cached_value is None or module.cache_index is None:
        raise ValueError(
            f"{describe(module)}: decoding needs a cache; call .init_cache(input_shape) first."
        )
    *batch, max_length, heads, depth = module.cached_key.shape
    if tuple(key.shape) != (*batch, 1, heads, depth):
        raise shape_error(
            module,
            f"one decoding step: inputs of shape {(*batch, 1, inputs_k.shape[-1])} "
            f"matching the cache {tuple(module.cached_key.shape)}",
            inputs_k.shape,
        )
    index = module.cache_index[...]
    zero = jnp.zeros((), index.dtype)
    start = (zero,) * len(batch) + (index, zero, zero)
    cached_key, cached_value = module.cached_key[...], module.cached_value[...]
    key = lax.dynamic_update_slice(cached_key, key.astype(cached_key.dtype), start)
    value = lax.dynamic_update_slice(cached_value, value.astype(cached_value.dtype), start)
    module.cached_key[...] = key
    module.cached_value[...] = value
    module.cache_index[...] += 1
    filled = jnp.broadcast_to(jnp.arange(max_length) <= index, (*batch, 1, 1, max_length))
    return key, value, combine_masks(mask, filled)


class MultiHeadAttention(Module):
    """Multi-head (self- or cross-) attention with optional autoregressive cache.

    Args:
      num_heads: the number of query heads.
      in_features: the queries' feature size.
      qkv_features: total projected size over all heads (default ``in_features``),
        divisible by ``num_heads``.
      out_features: the output feature size (default ``in_features``).
      num_kv_heads: key/value heads (default ``num_heads``; grouped-query attention),
        dividing ``num_heads``.
      in_kv_features: the keys'/values' input feature size (default ``in_features``).
      dtype, param_dtype, precision: as in ``Linear``.
      broadcast_dropout: one attention-dropout mask for all batch elements and heads.
      dropout_rate: the attention-weights dropout rate (default 0).
      deterministic: the default mode (no dropout), set by ``Module.eval()``/``train()``.
      kernel_init, bias_init: q/k/v projection initializers; ``out_kernel_init``/
        ``out_bias_init`` the output's (default the same).
      use_bias: projections have biases.
      attention_fn: ``dot_product_attention`` or a function with its signature.
      decode: the default decoding mode.
      normalize_qk: a bias-free ``LayerNorm`` on queries and keys per head.
      qkv_promote_dtype, out_promote_dtype, ln_promote_dtype: dtype promotion functions.
      qkv_dot_general, out_dot_general: contraction functions of the projections;
        ``qkv_dot_general_cls``/``out_dot_general_cls``: factories for them instead.
      rngs: ``nnx.Rngs``; with ``keep_rngs`` and a dropout rate, a fork of ``dropout``
        is kept as ``self.rngs``.
      kernel_metadata, bias_metadata, out_kernel_metadata, out_bias_metadata,
        query_ln_scale_metadata, key_ln_scale_metadata: Param metadata.

    Call: ``inputs_q`` ``(*batch, q_length, in_features)``; ``inputs_k``/``inputs_v``
    ``(*batch, kv_length, in_kv_features)`` (default ``inputs_q``, then ``inputs_k``);
    optional ``mask`` broadcastable to ``(*batch, num_heads, q_length, kv_length)``,
    ``deterministic``, ``rngs``, ``sow_weights`` (sown as ``attention_weights``),
    ``decode``, ``is_causal``, ``qkv_sharding``/``out_sharding``. Returns
    ``(*batch, q_length, out_features)``.

    Raises:
      ValueError: at construction, indivisible feature/head counts; at call, ``inputs_v``
        without ``inputs_k``, decoding before ``init_cache``, dropout without keys.
      LayerShapeError: inputs with the wrong feature size, or a decoding step that does
        not match the cache.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("num_heads", "in_features", "qkv_features")

    def __init__(
        self,
        num_heads: int,
        in_features: int,
        qkv_features: int | None = None,
        out_features: int | None = None,
        num_kv_heads: int | None = None,
        in_kv_features: int | None = None,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        broadcast_dropout: bool = True,
        dropout_rate: float = 0.0,
        deterministic: bool | None = None,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        out_kernel_init: Initializer | None = None,
        bias_init: Initializer = zeros,
        out_bias_init: Initializer | None = None,
        use_bias: bool = True,
        attention_fn: Callable[..., jax.Array] = dot_product_attention,
        decode: bool | None = None,
        normalize_qk: bool = False,
        qkv_promote_dtype: Callable[..., Any] = promote_dtype,
        out_promote_dtype: Callable[..., Any] = promote_dtype,
        ln_promote_dtype: Callable[..., Any] = promote_dtype,
        qkv_dot_general: Callable[..., jax.Array] | None = None,
        out_dot_general: Callable[..., jax.Array] | None = None,
        qkv_dot_general_cls: Any = None,
        out_dot_general_cls: Any = None,
        rngs: Rngs,
        keep_rngs: bool = True,
        kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        out_kernel_metadata: Mapping[str, Any] = EMPTY_METADATA,
        bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
        out_bias_metadata: Mapping[str, Any] = EMPTY_METADATA,
        query_ln_scale_metadata: Mapping[str, Any] = EMPTY_METADATA,
        key_ln_scale_metadata: Mapping[str, Any] = EMPTY_METADATA,
    ):
        qkv_features = in_features if qkv_features is None else qkv_features
        out_features = in_features if out_features is None else out_features
        in_kv_features = in_features if in_kv_features is None else in_kv_features
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        _check_heads(qkv_features, num_heads, num_kv_heads)
        self.num_heads = num_heads
        self.in_features = in_features
        self.qkv_features = qkv_features
        self.out_features = out_features
        self.num_kv_heads = num_kv_heads
        self.in_kv_features = in_kv_features
        self.head_dim = qkv_features // num_heads
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.broadcast_dropout = broadcast_dropout
        self.dropout_rate = dropout_rate
        self.deterministic = deterministic
        self.precision = precision
        self.use_bias = use_bias
        self.attention_fn = attention_fn
        self.decode = decode
        self.normalize_qk = normalize_qk

        self._make_sublayers(
            rngs, kernel_init=kernel_init, bias_init=bias_init,
            out_kernel_init=out_kernel_init, out_bias_init=out_bias_init,
            qkv_promote_dtype=qkv_promote_dtype, out_promote_dtype=out_promote_dtype,
            ln_promote_dtype=ln_promote_dtype, qkv_dot_general=qkv_dot_general,
            out_dot_general=out_dot_general, qkv_dot_general_cls=qkv_dot_general_cls,
            out_dot_general_cls=out_dot_general_cls, kernel_metadata=kernel_metadata,
            out_kernel_metadata=out_kernel_metadata, bias_metadata=bias_metadata,
            out_bias_metadata=out_bias_metadata,
            query_ln_scale_metadata=query_ln_scale_metadata,
            key_ln_scale_metadata=key_ln_scale_metadata,
        )  # fmt: skip
        self.rngs = own_stream(rngs, "dropout") if keep_rngs and dropout_rate > 0.0 else None
        self.cached_key: Cache[jax.Array] | None = None
        self.cached_value: Cache[jax.Array] | None = None
        self.cache_index: Cache[jax.Array] | None = None

    def _make_sublayers(
        self,
        rngs: Rngs,
        *,
        kernel_init: Initializer,
        bias_init: Initializer,
        out_kernel_init: Initializer | None,
        out_bias_init: Initializer | None,
        qkv_promote_dtype: Callable[..., Any],
        out_promote_dtype: Callable[..., Any],
        ln_promote_dtype: Callable[..., Any],
        qkv_dot_general: Callable[..., jax.Array] | None,
        out_dot_general: Callable[..., jax.Array] | None,
        qkv_dot_general_cls: Any,
        out_dot_general_cls: Any,
        kernel_metadata: Mapping[str, Any],
        out_kernel_metadata: Mapping[str, Any],
        bias_metadata: Mapping[str, Any],
        out_bias_metadata: Mapping[str, Any],
        query_ln_scale_metadata: Mapping[str, Any],
        key_ln_scale_metadata: Mapping[str, Any],
    ) -> None:
        """The q/k/v/output projections and the optional query/key LayerNorms."""
        common: dict[str, Any] = dict(
            dtype=self.dtype, param_dtype=self.param_dtype, use_bias=self.use_bias,
            precision=self.precision, rngs=rngs,
        )  # fmt: skip
        projection = functools.partial(
            LinearGeneral,
            kernel_init=kernel_init,
            bias_init=bias_init,
            promote_dtype=qkv_promote_dtype,
            dot_general=qkv_dot_general,
            dot_general_cls=qkv_dot_general_cls,
            kernel_metadata=kernel_metadata,
            bias_metadata=bias_metadata,
            **common,
        )
        head_dim = self.head_dim
        self.query = projection(
            in_features=self.in_features, out_features=(self.num_heads, head_dim)
        )
        self.key = projection(
            in_features=self.in_kv_features, out_features=(self.num_kv_heads, head_dim)
        )
        self.value = projection(
            in_features=self.in_kv_features, out_features=(self.num_kv_heads, head_dim)
        )
        if self.normalize_qk:
            norm = functools.partial(
                LayerNorm,
                self.head_dim,
                use_bias=False,
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                promote_dtype=ln_promote_dtype,
                rngs=rngs,
            )
            self.query_ln: LayerNorm | None = norm(scale_metadata=query_ln_scale_metadata)
            self.key_ln: LayerNorm | None = norm(scale_metadata=key_ln_scale_metadata)
        else:
            self.query_ln = None
            self.key_ln = None
        # after the LayerNorms, as Flax's (their keys come first from rngs)
        self.out = LinearGeneral(
            (self.num_heads, self.head_dim),
            self.out_features,
            axis=(-2, -1),
            kernel_init=out_kernel_init or kernel_init,
            bias_init=out_bias_init or bias_init,
            promote_dtype=out_promote_dtype,
            dot_general=out_dot_general,
            dot_general_cls=out_dot_general_cls,
            kernel_metadata=out_kernel_metadata,
            bias_metadata=out_bias_metadata,
            **common,
        )

    def set_view(
        self,
        deterministic: bool | None = None,
        decode: bool | None = None,
        batch_size: int | tuple[int, ...] | None = None,
        max_length: int | None = None,
    ) -> None:
        """Used by ``nnx.view`` to configure a copy of the layer.

        Args:
          deterministic: if True, the module is set to deterministic mode.
          decode: if True, the module is set to decode mode (creating a zeroed
            cache of ``batch_size`` sequences of ``max_length`` if it has none).
          batch_size: the batch size (or batch shape) to use for the cache.
          max_length: the max length to use for the cache.

        Raises:
          TypeError: ``decode=True`` on a layer without a cache and ``batch_size``
            or ``max_length`` missing.
        """
        if deterministic is not None:
            self.deterministic = deterministic
        if decode is None:
            return
        self.decode = decode
        if decode and (self.cached_key is None or self.cache_index is None):
            if batch_size is None or max_length is None:
                raise TypeError(
                    "MultiHeadAttention.set_view(decode=True): the layer has no cache yet, "
                    "so batch_size and max_length are needed to create one; pass both "
                    "(nnx.view(model, decode=True, batch_size=..., max_length=...))."
                )
            batch = (batch_size,) if isinstance(batch_size, int) else tuple(batch_size)
            dtype = self.dtype if self.dtype is not None else jnp.float32
            self.init_cache((*batch, max_length, self.in_features), dtype)

    def init_cache(self, input_shape: tuple[int, ...], dtype: Dtype = jnp.float32) -> None:
        """Creates zeroed ``cached_key``/``cached_value`` and ``cache_index = 0``.

        Args:
          input_shape: the full sequence's shape ``(*batch, max_length, in_features)``; the
            caches are ``(*batch, max_length, num_kv_heads, head_dim)``.
          dtype: the caches' dtype.

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> mha = nnx.MultiHeadAttention(2, 8, decode=True, rngs=nnx.Rngs(0))
        >>> mha.init_cache((1, 4, 8))
        >>> mha(jnp.ones((1, 1, 8))).shape, int(mha.cache_index.value)
        ((1, 1, 8), 1)
        """
        shape = (*tuple(input_shape)[:-1], self.num_kv_heads, self.head_dim)
        self.cached_key = Cache(jnp.zeros(shape, dtype))
        self.cached_value = Cache(jnp.zeros(shape, dtype))
        self.cache_index = Cache(jnp.array(0, dtype=jnp.int32))

    def __call__(
        self,
        inputs_q: jax.Array,
        inputs_k: jax.Array | None = None,
        inputs_v: jax.Array | None = None,
        *,
        mask: jax.Array | None = None,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | jax.Array | None = None,
        sow_weights: bool = False,
        decode: bool | None = None,
        is_causal: bool = False,
        out_sharding: Any = None,
        qkv_sharding: Any = None,
    ) -> jax.Array:
        if inputs_k is None:
            if inputs_v is not None:
                raise ValueError(
                    f"{describe(self)}: inputs_v was given without inputs_k; to use one array "
                    "for keys and values pass it as inputs_k and leave inputs_v None."
                )
            inputs_k = inputs_q
        if inputs_v is None:
            inputs_v = inputs_k
        inputs_q, inputs_k, inputs_v = map(jnp.asarray, (inputs_q, inputs_k, inputs_v))
        check_last_dim(self, inputs_q, self.in_features, "queries")

        query = self.query(inputs_q, out_sharding=qkv_sharding)
        key = self.key(inputs_k, out_sharding=qkv_sharding)
        value = self.value(inputs_v, out_sharding=qkv_sharding)
        if self.normalize_qk:
            assert self.query_ln is not None and self.key_ln is not None
            query = self.query_ln(query)
            key = self.key_ln(key)

        if first_from(decode, self.decode, False, error_msg=""):
            key, value, mask = _decode_step(self, inputs_k, key, value, mask)

        dropout_rng = None
        if self.dropout_rate > 0.0:
            deterministic = first_from(
                deterministic,
                self.deterministic,
                error_msg=f"{describe(self)}: deterministic is None on the layer and in the "
                "call; pass deterministic=True/False or call .train()/.eval().",
            )
            if not deterministic:
                dropout_rng = draw_key(describe(self), rngs, self.rngs, "dropout")
        else:
            deterministic = True

        # with num_kv_heads < num_heads, attention_fn receives the key/value heads
        # as they are (grouped-query attention), as in Flax NNX
        x = self.attention_fn(
            query,
            key,
            value,
            mask=mask,
            dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate,
            broadcast_dropout=self.broadcast_dropout,
            deterministic=deterministic,
            dtype=self.dtype,
            precision=self.precision,
            module=self if sow_weights else None,
            is_causal=is_causal,
        )
        return self.out(x, out_sharding=out_sharding)


__all__ = [
    "Array",
    "MultiHeadAttention",
    "combine_masks",
    "dot_product_attention",
    "dot_product_attention_weights",
    "make_attention_mask",
    "make_causal_mask",
    "DotGeneralT",
    "PrecisionLike",
    "PromoteDtypeFn",
    "Shape",
]
