"""Weight-normalizing wrappers: ``SpectralNorm`` and ``WeightNorm``.

Each wraps a layer (``layer_instance``) and, on every call, replaces some of
that layer's Variables by a normalized version of their current value, then
calls the layer:

* ``SpectralNorm``: every ``Param`` of rank >= 2 is divided by its largest
  singular value ``sigma``, estimated by power iteration from a stored vector
  ``u``. ``u`` and ``sigma`` are ``BatchStat`` Variables in the dict
  ``batch_stats`` keyed by ``param_path + ('u',)`` / ``param_path + ('sigma',)``;
  they are updated only in training mode (``use_running_average=False``, what
  ``Module.train()`` sets, or ``update_stats=True`` at the call).
* ``WeightNorm``: every Variable matched by ``variable_filter`` (default: the
  ``kernel``) is divided by its L2 norm over the non-feature axes and multiplied
  by a learned ``scale`` (``Param``s in the dict ``scales``, keyed by the path).

As in Flax NNX, the normalized value is *written into the wrapped layer's
Variable* (after a call, ``layer_instance.kernel`` holds the normalized kernel;
gradients flow through the normalization to the value it was computed from).
If the wrapped layer raises, its Variables are restored: a failed call changes
nothing.

  >>> import jax.numpy as jnp, numpy as np, flaxgraph as nnx
  >>> layer = nnx.WeightNorm(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
  >>> y = layer(jnp.ones((4, 3)))
  >>> np.linalg.norm(np.asarray(layer.layer_instance.kernel.value), axis=0).round(5)
  array([1., 1.], dtype=float32)

Source: Flax NNX ``nnx.SpectralNorm``/``nnx.WeightNorm`` (0.12) public
signatures, Variable layout and behaviour; Miyato et al., "Spectral
Normalization for Generative Adversarial Networks" (2018); Salimans & Kingma,
"Weight Normalization" (2016).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax import lax

from flaxgraph.filterlib import Filter, PathContains, to_predicate
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.module_class import Module
from flaxgraph.nn.common import canonicalize_tuple
from flaxgraph.nn.dtypes import canonicalize_dtype, promote_dtype
from flaxgraph.nn.errors import LayerInputError, describe
from flaxgraph.nn.initializers import normal, ones
from flaxgraph.rnglib.rngs import Rngs
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import BatchStat, Param, is_variable

Dtype = Any
Initializer = Callable[..., Any]

KERNEL_FILTER = PathContains("kernel", exact=True)
"""``WeightNorm``'s default ``variable_filter``: Variables under a ``kernel`` key."""


def _path_order(path: PathParts) -> tuple[str, ...]:
    return tuple(str(k) for k in path)


def _variables(layer: Module, predicate: Callable[[PathParts, Any], bool]) -> list[Any]:
    """``(path, variable)`` of the layer's Variables that ``predicate`` selects,
    sorted by path (the order of a flat ``nnx.state``)."""
    found = [
        (path, value)
        for path, value in iter_graph(layer)
        if is_variable(value) and predicate(path, value)
    ]
    return sorted(found, key=lambda item: _path_order(item[0]))


def _l2_normalize(v: jax.Array, epsilon: float) -> jax.Array:
    """``v / sqrt(sum(v²) + epsilon)`` over all of ``v``."""
    return v * lax.rsqrt(jnp.sum(jnp.square(v)) + epsilon)


@contextmanager
def _restoring(wrapper: Module, variables: list[Any]) -> Iterator[None]:
    """Restores ``variables``' values if the body raises; a ``LayerInputError``
    from the wrapped layer is re-raised naming the wrapper too."""
    saved = [v.value for v in variables]
    try:
        yield
    except LayerInputError as e:
        for v, old in zip(variables, saved):
            v.value = old
        raise type(e)(f"in {describe(wrapper)}.layer_instance: {e}", wrapper) from e
    except BaseException:
        for v, old in zip(variables, saved):
            v.value = old
        raise


class SpectralNorm(Module):
    """Spectral normalization of a wrapped layer's weight matrices.

    Before each call of ``layer_instance``, every ``Param`` ``W`` of rank >= 2 is
    viewed as a matrix ``W2`` of shape ``(prod(W.shape[:-1]), W.shape[-1])`` and
    replaced by ``W / sigma``, with ``sigma`` the power-iteration estimate of its
    largest singular value, starting from the stored ``u`` (shape
    ``(1, W.shape[-1])``)::

      repeat n_steps times:
        v = l2_normalize(u @ W2.T)        # l2_normalize(a) = a / sqrt(sum(a²) + epsilon)
        u = l2_normalize(v @ W2)
      sigma = v @ W2 @ u.T                 # u, v are treated as constants for gradients

    In training mode the new ``u`` and ``sigma`` are stored; in evaluation mode the
    stored ``u`` is used and nothing is stored, so the output is deterministic.
    Rank-0 and rank-1 Params (e.g. a bias) are left unchanged.

    Args:
      layer_instance: the layer to wrap (any Module).
      n_steps: power-iteration steps per call (default 1).
      epsilon: added inside the square root of the L2 normalization (default ``1e-12``).
      dtype: the dtype the normalized value is rounded to (default: promoted
        from the Param, ``u`` and ``sigma``); the power iteration runs in the
        stored dtypes, as in Linen, and the result is stored back in the
        Param's own dtype.
      param_dtype: the dtype of ``u`` and ``sigma`` (default ``float32``).
      error_on_non_matrix: raise for Params of rank > 2 instead of flattening
        their leading axes.
      update_stats: the initial mode: ``True`` (default) sets
        ``use_running_average=False`` (training: the statistics are updated).
      rngs: an ``nnx.Rngs``; its ``params`` stream draws each initial ``u``
        (normal, stddev 0.01).

    Attributes:
      use_running_average: ``not update_stats``; ``Module.eval()`` sets it to
        True (no updates) and ``Module.train()`` to False.
      batch_stats: ``{param_path + ('u',): BatchStat (1, n), param_path +
        ('sigma',): BatchStat ()}`` for each normalized Param.

    Call: ``x`` (and the wrapped layer's inputs); ``update_stats`` overrides the
    mode for this call (``True``: store ``u``/``sigma``). Returns the wrapped
    layer's output.

    Raises:
      ValueError: at construction, a Param of rank > 2 with ``error_on_non_matrix``.
      LayerShapeError / LayerDtypeError: the wrapped layer rejects ``x``; the
        message names this wrapper and the Variables are left unchanged.

    Example::

      >>> import jax.numpy as jnp, numpy as np, flaxgraph as nnx
      >>> layer = nnx.SpectralNorm(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), n_steps=20,
      ...                          rngs=nnx.Rngs(1))
      >>> y = layer(jnp.ones((2, 4)))                      # training: stats updated
      >>> s = np.linalg.svd(np.asarray(layer.layer_instance.kernel.value))[1]
      >>> round(float(s[0]), 4)
      1.0
      >>> sorted(layer.batch_stats)
      [('kernel', 'sigma'), ('kernel', 'u')]

    Source: Flax NNX ``nnx.SpectralNorm`` (0.12): signature, ``batch_stats``
    layout, update rules; Miyato et al. (2018). Unlike Flax, a wrapped-layer
    error restores the kernel and names the wrapper.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("layer_instance",)

    def __init__(
        self,
        layer_instance: Module,
        *,
        n_steps: int = 1,
        epsilon: float = 1e-12,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        error_on_non_matrix: bool = False,
        update_stats: bool = True,
        rngs: Rngs,
    ):
        batch_stats: dict[PathParts, BatchStat[Any]] = {}
        init_u = normal(stddev=1e-2)
        for path, param in _variables(layer_instance, self._selects):
            ndim = param.value.ndim
            if ndim > 2 and error_on_non_matrix:
                raise ValueError(
                    f"SpectralNorm: the Param layer_instance.{'.'.join(map(str, path))} has "
                    f"rank {ndim} (shape {tuple(param.value.shape)}) and error_on_non_matrix=True; "
                    "pass error_on_non_matrix=False to flatten its leading axes into one."
                )
            n = param.value.shape[-1]
            batch_stats[(*path, "u")] = BatchStat(init_u(rngs.params(), (1, n), param_dtype))
            batch_stats[(*path, "sigma")] = BatchStat(jnp.ones((), param_dtype))
        self.layer_instance: Any = layer_instance  # any Module, called like one
        self.n_steps = n_steps
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.error_on_non_matrix = error_on_non_matrix
        self.use_running_average = not update_stats
        self.batch_stats = batch_stats

    @staticmethod
    def _selects(path: PathParts, value: Any) -> bool:
        return isinstance(value, Param) and jnp.ndim(value.value) > 1

    def _normalized(self, w: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(w / sigma, new u, sigma)`` by ``n_steps`` of power iteration.

        The iteration runs in the stored dtypes (as Linen and Flax NNX do); only
        the normalized weight is cast to ``dtype`` (default: promoted from
        ``w``, ``u``, ``v`` and ``sigma``). A zero ``sigma`` leaves ``w`` as is.
        """
        w2 = jnp.reshape(w, (-1, w.shape[-1]))
        v = u
        for _ in range(self.n_steps):
            v = _l2_normalize(u @ w2.T, self.epsilon)
            u = _l2_normalize(v @ w2, self.epsilon)
        u, v = lax.stop_gradient(u), lax.stop_gradient(v)
        sigma = jnp.reshape(v @ w2 @ u.T, ())
        w_new = w / jnp.where(sigma != 0, sigma, 1)
        return w_new.astype(canonicalize_dtype(w, u, v, sigma, dtype=self.dtype)), u, sigma

    def __call__(self, x: Any, update_stats: bool | None = None) -> Any:
        if update_stats is None:
            if self.use_running_average is None:
                raise ValueError(
                    "SpectralNorm: use_running_average is None and update_stats was not "
                    "given; pass update_stats=True/False or call .train()/.eval()."
                )
            update_stats = not self.use_running_average
        targets = [
            (path, param)
            for path, param in _variables(self.layer_instance, self._selects)
            if (*path, "u") in self.batch_stats
        ]
        updates = []
        for path, param in targets:
            u_stat = self.batch_stats[(*path, "u")]
            w_new, u, sigma = self._normalized(param.value, u_stat.value)
            updates.append((param, w_new.astype(param.value.dtype), path, u, sigma))
        params = [param for param, *_ in updates]
        with _restoring(self, params):
            for param, w_new, *_ in updates:
                param.value = w_new
            y = self.layer_instance(x)
        if update_stats:
            for _, _, path, u, sigma in updates:
                u_stat = self.batch_stats[(*path, "u")]
                sigma_stat = self.batch_stats[(*path, "sigma")]
                u_stat.value = u.astype(u_stat.value.dtype)
                sigma_stat.value = sigma.astype(sigma_stat.value.dtype)
        return y


class WeightNorm(Module):
    """Weight normalization: selected Variables of a wrapped layer rescaled to unit
    L2 norm per feature, times a learned scale.

    Before each call of ``layer_instance``, every Variable ``W`` matched by
    ``variable_filter`` is replaced by::

      W * scale / sqrt(sum(W², axes=non-feature axes) + epsilon)

    with ``scale`` of shape ``tuple(W.shape[a] for a in feature_axes)`` (``()``
    for ``feature_axes=None``: one norm over the whole array), broadcast along the
    feature axes.

    Args:
      layer_instance: the layer to wrap.
      feature_axes: the axes that keep separate norms (default ``-1``, the output
        features of a ``Linear``/``Conv`` kernel); ``None`` for a single norm.
      use_scale: learn ``scale`` (default True); otherwise ``scales`` is None.
      scale_init: the scales' initializer (default ``ones``).
      epsilon: added inside the square root (default ``1e-12``).
      dtype: the dtype the normalized value is rounded to (default: promoted
        from the Variable and the scale); the norm itself is computed in the
        Variable's dtype, and the result is stored back in the Variable's own
        dtype.
      param_dtype: the scales' dtype (default ``float32``).
      variable_filter: which Variables of the layer to normalize (default
        ``nnx.PathContains('kernel')``, exact key match).
      promote_dtype: the dtype promotion function (kept as an attribute for
        Flax's signature; the normalization itself follows Linen's dtypes).
      rngs: an ``nnx.Rngs`` (its ``params`` stream seeds ``scale_init``).

    Attributes:
      scales: ``{variable_path: Param}`` (``None`` without ``use_scale``).

    Call: ``x`` and any further arguments, passed to the wrapped layer; returns
    its output.

    Raises:
      ValueError: at construction, a feature axis out of range for a selected
        Variable.
      LayerShapeError / LayerDtypeError: the wrapped layer rejects its inputs (the
        message names this wrapper and the Variables are left unchanged).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> conv = nnx.Conv(3, 8, (3, 3), rngs=nnx.Rngs(0))
      >>> layer = nnx.WeightNorm(conv, rngs=nnx.Rngs(1))
      >>> layer.scales[('kernel',)].shape, layer(jnp.ones((1, 5, 5, 3))).shape
      ((8,), (1, 5, 5, 8))

    Source: Flax NNX ``nnx.WeightNorm`` (0.12): signature, ``scales`` layout,
    behaviour; Salimans & Kingma (2016). Deliberate differences: the scales are
    ``Param`` Variables (trained by an ``nnx.Optimizer(wrt=nnx.Param)``; Flax
    keeps plain arrays), ``scale_init`` receives a key and ``param_dtype``, and
    the normalized value keeps the Variable's dtype.
    """

    _describe_fields: ClassVar[tuple[str, ...]] = ("layer_instance",)

    def __init__(
        self,
        layer_instance: Module,
        *,
        feature_axes: int | tuple[int, ...] | None = -1,
        use_scale: bool = True,
        scale_init: Initializer = ones,
        epsilon: float = 1e-12,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        variable_filter: Filter = KERNEL_FILTER,
        promote_dtype: Callable[..., Any] = promote_dtype,
        rngs: Rngs,
    ):
        self.feature_axes = (
            None if feature_axes is None else canonicalize_tuple(feature_axes, "feature_axes")
        )
        self.layer_instance: Any = layer_instance  # any Module, called like one
        self.use_scale = use_scale
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.variable_filter = variable_filter
        self.promote_dtype = promote_dtype
        scales: dict[PathParts, Param[Any]] = {}
        for path, var in _variables(layer_instance, to_predicate(variable_filter)):
            features = self._features(path, jnp.ndim(var.value))
            if use_scale:
                shape = tuple(var.value.shape[a] for a in features)
                scales[path] = Param(scale_init(rngs.params(), shape, param_dtype))
        self.scales = scales if use_scale else None

    def _features(self, path: PathParts, ndim: int) -> tuple[int, ...]:
        """The normalized feature axes of a rank-``ndim`` Variable at ``path``."""
        if self.feature_axes is None:
            return ()
        out = []
        for a in self.feature_axes:
            if not -ndim <= a < ndim:
                raise ValueError(
                    f"WeightNorm: feature axis {a} is out of range for the rank-{ndim} "
                    f"Variable layer_instance.{'.'.join(map(str, path))}; give feature_axes "
                    "valid for every Variable variable_filter selects."
                )
            out.append(a % ndim)
        return tuple(sorted(set(out)))

    def _normalized(self, path: PathParts, w: jax.Array) -> jax.Array:
        features = self._features(path, w.ndim)
        scale = None if self.scales is None else self.scales[path].value
        # as Linen and Flax NNX: the norm is taken in the Variable's own dtype and
        # only the result is cast to ``dtype`` (default: promoted from both)
        reduce = tuple(a for a in range(w.ndim) if a not in features)
        y = w * lax.rsqrt(jnp.sum(w * w, reduce, keepdims=True) + self.epsilon)
        if scale is not None:
            shape = tuple(w.shape[a] if a in features else 1 for a in range(w.ndim))
            y = y * jnp.reshape(scale, shape)
        return y.astype(canonicalize_dtype(w, scale, dtype=self.dtype))

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        predicate = to_predicate(self.variable_filter)
        targets = _variables(self.layer_instance, predicate)
        if self.scales is not None:
            targets = [(p, v) for p, v in targets if p in self.scales]
        new_values = [self._normalized(p, v.value).astype(v.value.dtype) for p, v in targets]
        variables = [v for _, v in targets]
        with _restoring(self, variables):
            for v, value in zip(variables, new_values):
                v.value = value
            return self.layer_instance(x, *args, **kwargs)


__all__ = ["SpectralNorm", "WeightNorm"]
