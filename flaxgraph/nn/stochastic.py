"""``Dropout``: randomly zeroes inputs in training, the identity in evaluation.

See the package README, "Dropout".

>>> import jax.numpy as jnp, flaxgraph as nnx
>>> drop = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=0))
>>> y = drop(jnp.ones(8))              # entries are 0. or 2.
>>> bool(((y == 0) | (y == 2)).all())
True
>>> bool((drop.eval()(jnp.ones(8)) == 1).all())   # eval(): identity
True

Source: Flax NNX ``nnx.Dropout`` (0.11+: a forked stream per layer); Srivastava et al.,
"Dropout" (2014); masks from ``jax.random.bernoulli``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from flaxgraph.module_class import Module
from flaxgraph.nn.common import first_from
from flaxgraph.nn.errors import describe, normalize_axis
from flaxgraph.rnglib.rngs import Rngs, RngStream


def own_stream(rngs: Rngs | RngStream | None, collection: str) -> RngStream | None:
    """A fork of ``rngs[collection]`` (or of the stream itself) for a layer to keep."""
    if rngs is None:
        return None
    if isinstance(rngs, RngStream):
        return rngs.fork()
    if isinstance(rngs, Rngs):
        return rngs[collection].fork()
    raise TypeError(
        f"rngs must be an nnx.Rngs, an nnx.RngStream or None, got {type(rngs).__name__}."
    )


def draw_key(
    owner: str,
    rngs: Rngs | RngStream | jax.Array | None,
    own: Rngs | RngStream | jax.Array | None,
    collection: str | Callable[[], str],
) -> jax.Array:
    """A key from the call's ``rngs`` (Rngs, stream or key), else the layer's stream; ``ValueError`` if neither."""
    # ``collection`` may be a function giving the name, called only for an Rngs (a
    # layer's rng_collection attribute is read only there, as Flax's Dropout does).
    source = rngs if rngs is not None else own
    if isinstance(source, Rngs):
        return source[collection if isinstance(collection, str) else collection()]()
    if isinstance(source, RngStream):
        return source()
    if source is not None:
        return jnp.asarray(source)
    if not isinstance(collection, str):
        collection = collection()
    raise ValueError(
        f"`deterministic` is False, but no `rngs` argument was provided to {owner}, "
        "and it has no random stream of its own to draw keys from. Fix: pass "
        f"rngs=nnx.Rngs({collection}=0) when constructing it or rngs=... when calling it, "
        "or make it deterministic (deterministic=True or .eval())."
    )


class Dropout(Module):
    """Dropout.

    Args:
      rate: the probability of zeroing an element, in ``[0, 1]``.
      broadcast_dims: axes along which one mask is shared (e.g. ``(1,)`` for time).
      deterministic: the default mode, True the identity (default False); set by
        ``Module.eval()``/``train()``, overridden by a call argument.
      rng_collection: the stream to fork from ``rngs`` (default ``'dropout'``, else
        ``default``).
      rngs: ``nnx.Rngs`` or ``nnx.RngStream``, forked and kept as ``self.rngs``; optional
        if keys are passed at call.

    Call: ``inputs`` of any shape and dtype; optional ``deterministic`` and ``rngs`` (an
    ``Rngs``, a stream or a key). Returns the inputs' shape, dtype (and sharding, under
    Explicit mesh axes).

    Raises:
      ValueError: at construction, ``rate`` outside ``[0, 1]``; at call, keys needed but
        no stream given, or ``deterministic`` None on both layer and call.
      LayerShapeError: a ``broadcast_dims`` axis is out of range for the inputs.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("rate",)

    def __init__(
        self,
        rate: float,
        *,
        broadcast_dims: Sequence[int] = (),
        deterministic: bool | None = False,
        rng_collection: str = "dropout",
        rngs: Rngs | RngStream | None = None,
    ):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"Dropout: rate must be in [0, 1], got {rate}.")
        self.rate = rate
        self.broadcast_dims = tuple(broadcast_dims)
        self.deterministic = deterministic
        self.rng_collection = rng_collection
        self.rngs = own_stream(rngs, rng_collection)

    def set_view(self, deterministic: bool | None = None) -> None:
        """Used by ``nnx.view`` to configure a copy of the layer.

        Args:
          deterministic: if True, disables dropout masking.
        """
        if deterministic is not None:
            self.deterministic = deterministic

    def __call__(
        self,
        inputs: jax.Array,
        *,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | jax.Array | None = None,
    ) -> jax.Array:
        x = jnp.asarray(inputs)
        deterministic = first_from(
            deterministic,
            self.deterministic,
            error_msg=f"{describe(self)}: deterministic is None on the layer and in the call; "
            "pass deterministic=True/False or call .train()/.eval().",
        )
        if deterministic or self.rate == 0.0:
            return x
        if self.rate == 1.0:
            return jnp.zeros_like(x)
        key = draw_key(describe(self), rngs, self.rngs, lambda: self.rng_collection)
        keep = 1.0 - self.rate
        mask_shape = list(x.shape)
        for dim in self.broadcast_dims:
            mask_shape[normalize_axis(self, dim, x.ndim, x.shape, "broadcast dim")] = 1
        x_sharding, mask_sharding = _explicit_shardings(x, mask_shape)
        mask = jax.random.bernoulli(
            key, p=keep, shape=tuple(mask_shape), out_sharding=mask_sharding
        )
        mask = jnp.broadcast_to(mask, x.shape, out_sharding=x_sharding)
        scaled = x / keep
        return lax.select(mask, scaled, jnp.zeros_like(scaled))


def _explicit_shardings(x: jax.Array, mask_shape: list[int]) -> tuple[Any, Any]:
    """Under Explicit mesh axes, the inputs' and the mask's shardings; ``(None, None)`` otherwise."""
    sharding = jax.typeof(x).sharding
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or mesh.empty or jax.sharding.AxisType.Explicit not in mesh.axis_types:
        return None, None
    spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
    mask_spec = PartitionSpec(
        *(None if n == 1 != d else e for e, n, d in zip(spec, mask_shape, x.shape))
    )
    return sharding, NamedSharding(mesh, mask_spec)


__all__ = ["Dropout", "draw_key", "own_stream"]
