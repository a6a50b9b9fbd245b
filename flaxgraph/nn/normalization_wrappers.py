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
  by a ``scale`` (plain float32 arrays in the dict ``scales``, keyed by the path,
  as Flax NNX keeps them: not Params, so not trained unless made Params).

As in Flax NNX, the normalized value is *written into the wrapped layer's
Variable* (after a call, ``layer_instance.kernel`` holds the normalized kernel;
gradients flow through the normalization to the value it was computed from).
If the wrapped layer raises, its Variables are restored (and ``SpectralNorm``'s
statistics are not updated): a failed call changes nothing.

Each ``__call__`` reads what Flax's reads of ``self`` (``layer_instance`` and the
method ``_weightnorm_inplace`` / ``_spectral_normalize_inplace``, plus
``use_running_average``), so Flax-style code calling it on a stand-in works.

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

import jax.numpy as jnp
from jax import lax

from flaxgraph.filterlib import Filter, PathContains, to_predicate
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.module_class import Module
from flaxgraph.nn.common import canonicalize_tuple
from flaxgraph.nn.dtypes import canonicalize_dtype, promote_dtype
from flaxgraph.nn.errors import LayerInputError, describe
from flaxgraph.nn.initializers import normal, ones
from flaxgraph.nn.norm_base import canonicalize_axes, l2_normalize_array
from flaxgraph.pytreelib.attribute_kinds import data
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


def _is_param(path: PathParts, value: Any) -> bool:
    return isinstance(value, Param)


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
            if n_steps < 1:  # as Flax's: no power iteration, no statistics
                break
            ndim = param.value.ndim
            if ndim > 2 and error_on_non_matrix:
                raise ValueError(
                    f"SpectralNorm: the Param layer_instance.{'.'.join(map(str, path))} has "
                    f"rank {ndim} (shape {tuple(param.value.shape)}) and error_on_non_matrix=True; "
                    "pass error_on_non_matrix=False to flatten its leading axes into one."
                )
            n = param.value.shape[-1]
            key = rngs.params()  # one key for both, as Flax's
            batch_stats[(*path, "u")] = BatchStat(init_u(key, (1, n), param_dtype))
            batch_stats[(*path, "sigma")] = BatchStat(ones(key, (), param_dtype))
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

    def _spectral_normalize_inplace(
        self, path: PathParts, param: Any, update_stats: bool
    ) -> Callable[[], None] | None:
        """Writes ``w / sigma`` into ``param`` (``sigma`` by ``n_steps`` of power
        iteration from the stored ``u``); with ``update_stats``, returns the function
        that writes the new ``u`` and ``sigma`` into ``batch_stats`` (Flax's method of
        that name writes them at once; ``__call__`` does after the wrapped layer
        succeeds, so a failed call changes nothing).

        The iteration runs in the stored dtypes; the normalized weight is rounded
        to ``dtype`` (default: promoted from ``w``, ``u``, ``v`` and ``sigma``) and
        written in the Variable's own dtype, as Flax's. A zero ``sigma`` leaves
        ``w`` as is.
        """
        w = param[...]
        if w.ndim <= 1 or self.n_steps < 1:
            return None
        w2 = jnp.reshape(w, (-1, w.shape[-1])) if w.ndim > 2 else w
        u_path, sigma_path = (*path, "u"), (*path, "sigma")
        if u_path not in self.batch_stats or sigma_path not in self.batch_stats:
            raise RuntimeError(
                f"SpectralNorm: no batch statistics for the Param layer_instance."
                f"{'.'.join(map(str, path))}; the wrapped layer's Params changed after "
                "construction. Build a new SpectralNorm around the changed layer."
            )
        u = self.batch_stats[u_path][...]
        v = u
        for _ in range(self.n_steps):
            v = l2_normalize_array(jnp.matmul(u, w2.T), eps=self.epsilon)
            u = l2_normalize_array(jnp.matmul(v, w2), eps=self.epsilon)
        u, v = lax.stop_gradient(u), lax.stop_gradient(v)
        sigma = jnp.matmul(jnp.matmul(v, w2), u.T)[0, 0]
        w_new = jnp.reshape(w2 / jnp.where(sigma != 0, sigma, 1), w.shape)
        # Flax's ``variable[...] = value`` keeps the Variable's dtype (a cast); so here
        w_new = jnp.asarray(w_new, canonicalize_dtype(w_new, u, v, sigma, dtype=self.dtype))
        param[...] = w_new.astype(w.dtype)
        if not update_stats:
            return None
        u_stat, sigma_stat = self.batch_stats[u_path], self.batch_stats[sigma_path]

        def commit() -> None:
            u_stat[...] = u.astype(u_stat[...].dtype)
            sigma_stat[...] = sigma.astype(sigma_stat[...].dtype)

        return commit

    def __call__(self, x: Any, update_stats: bool | None = None) -> Any:
        if update_stats is None:
            if self.use_running_average is None:
                raise ValueError(
                    "SpectralNorm: use_running_average is None and update_stats was not "
                    "given; pass update_stats=True/False or call .train()/.eval()."
                )
            update_stats = not self.use_running_average
        # Reads layer_instance and the method only (as Flax's); restores the wrapped
        # layer's Params if it raises.
        targets = _variables(self.layer_instance, _is_param)
        with _restoring(self, [v for _, v in targets]):
            commits = [
                self._spectral_normalize_inplace(path, param, update_stats=update_stats)
                for path, param in targets
            ]
            y = self.layer_instance(x)
        for commit in commits:
            if commit is not None:
                commit()
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
      use_scale: multiply by ``scale`` (default True); otherwise ``scales`` is None.
      scale_init: the scales' initializer, called as Flax's does,
        ``scale_init(rngs['params'], shape)``: the stream (not a key, and it does
        not advance) and no dtype, so the default ``ones`` gives float32 scales
        and an initializer that needs a key fails, in both libraries (assign
        ``layer.scales[path]`` after construction instead).
      epsilon: added inside the square root (default ``1e-12``).
      dtype: the dtype of the normalized value written into the Variable
        (default: promoted from the Variable and the scale); the norm itself is
        computed in the Variable's dtype.
      param_dtype: kept as an attribute for Flax's signature (the scales'
        dtype is ``scale_init``'s default, as in Flax).
      variable_filter: which Variables of the layer to normalize (default
        ``nnx.PathContains('kernel')``, exact key match).
      promote_dtype: the dtype promotion function (kept as an attribute for
        Flax's signature; the normalization itself follows Linen's dtypes).
      rngs: an ``nnx.Rngs`` (its ``params`` stream seeds ``scale_init``).

    Attributes:
      scales: ``{variable_path: array}`` (``None`` without ``use_scale``), plain
        arrays as in Flax: ``nnx.grad``/``nnx.Optimizer(wrt=nnx.Param)`` leave
        them fixed. To train them, make them Params:
        ``layer.scales = {p: nnx.Param(v) for p, v in layer.scales.items()}``.

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

    Source: Flax NNX ``nnx.WeightNorm`` (0.12): signature, ``scales`` layout
    (plain arrays), dtypes, behaviour; Salimans & Kingma (2016). Difference: a
    failing wrapped layer is restored and the error names the wrapper.
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
        self.scale_init = scale_init
        # As Flax's: plain arrays (no Params), from scale_init(rngs['params'], shape)
        # (the stream itself, no dtype: the default ones are float32), for every
        # Param the filter selects.
        scales: dict[PathParts, Any] | None = None
        if use_scale:
            scales = {}
            predicate = to_predicate(variable_filter)
            for path, var in _variables(layer_instance, _is_param):
                if predicate(path, var):
                    features = self._features(path, jnp.ndim(var.value))
                    shape = tuple(var.value.shape[a] for a in features)
                    scales[path] = scale_init(rngs["params"], shape)
        self.scales = data(scales)

    def _features(self, path: PathParts, ndim: int) -> tuple[int, ...]:
        """The normalized feature axes of a rank-``ndim`` Variable at ``path``."""
        if self.feature_axes is None:
            return ()
        for a in self.feature_axes:
            if not -ndim <= a < ndim:
                raise ValueError(
                    f"WeightNorm: feature axis {a} is out of range for the rank-{ndim} "
                    f"Variable layer_instance.{'.'.join(map(str, path))}; give feature_axes "
                    "valid for every Variable variable_filter selects."
                )
        return canonicalize_axes(ndim, self.feature_axes)

    def _weightnorm_inplace(self, path: PathParts, param: Any) -> None:
        """Writes the normalized value into ``param`` if ``variable_filter`` selects it
        (Flax's method of that name): the norm in the Variable's dtype, times the
        scale, the result in ``dtype`` (default: promoted from the Variable and the
        scale) as Flax's."""
        if not to_predicate(self.variable_filter)(path, param):
            return
        w = param[...]
        features = self._features(path, w.ndim)
        reduce = tuple(a for a in range(w.ndim) if a not in features)
        y = l2_normalize_array(w, axis=reduce, eps=self.epsilon)
        operands = [w]
        if self.use_scale:
            if self.scales is None or path not in self.scales:
                raise RuntimeError(
                    f"WeightNorm: no scale for the Variable layer_instance."
                    f"{'.'.join(map(str, path))}; the wrapped layer's Variables changed "
                    "after construction. Build a new WeightNorm around the changed layer."
                )
            scale = self.scales[path]
            if is_variable(scale):  # scales made Params by the user, to train them
                scale = scale[...]
            if len(features) < w.ndim:
                shape = [1] * w.ndim
                for a in features:
                    shape[a] = w.shape[a]
                scale = jnp.reshape(scale, shape)
            y = y * scale
            operands.append(scale)
        param.set_value(jnp.asarray(y, canonicalize_dtype(*operands, dtype=self.dtype)))

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        # Reads layer_instance and the method only (as Flax's); restores the wrapped
        # layer's Variables if it raises.
        targets = _variables(self.layer_instance, lambda path, value: True)
        with _restoring(self, [v for _, v in targets]):
            for path, variable in targets:
                self._weightnorm_inplace(path, variable)
            return self.layer_instance(x, *args, **kwargs)


__all__ = ["SpectralNorm", "WeightNorm"]
