"""Weight-normalizing wrappers: ``SpectralNorm`` and ``WeightNorm``.

See the package README, "Weight-normalizing wrappers".

Source: Flax NNX ``nnx.SpectralNorm``/``nnx.WeightNorm`` (0.12): signatures, Variable
layout, behaviour; Miyato et al., "Spectral Normalization for Generative Adversarial
Networks" (2018); Salimans & Kingma, "Weight Normalization" (2016).
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


def _variables(layer: Module, predicate: Callable[[PathParts, Any], bool]) -> list[Any]:
    """``(path, variable)`` of the layer's Variables that ``predicate`` selects, sorted by path."""
    found = [
        (path, value)
        for path, value in iter_graph(layer)
        if is_variable(value) and predicate(path, value)
    ]
    return sorted(found, key=lambda item: tuple(str(k) for k in item[0]))


def _is_param(path: PathParts, value: Any) -> bool:
    return isinstance(value, Param)


@contextmanager
def _restoring(wrapper: Module, variables: list[Any]) -> Iterator[None]:
    """Restores ``variables`` if the body raises, re-raising a layer error naming the wrapper."""
    saved = [v.value for v in variables]
    try:
        yield
    except BaseException as e:
        for v, old in zip(variables, saved):
            v.value = old
        if isinstance(e, LayerInputError):
            raise type(e)(f"in {describe(wrapper)}.layer_instance: {e}", wrapper) from e
        raise


class SpectralNorm(Module):
    """Spectral normalization: each ``Param`` of rank >= 2 divided by its largest singular value.

    ``W`` is viewed as ``(prod(W.shape[:-1]), W.shape[-1])``; ``sigma`` is estimated by
    ``n_steps`` of power iteration from the stored ``u`` (shape ``(1, W.shape[-1])``).
    Training mode stores the new ``u``/``sigma``; evaluation mode only reads them.
    Rank-0/1 Params are left unchanged.

    Args:
      layer_instance: the layer to wrap (any Module).
      n_steps: power-iteration steps per call (default 1).
      epsilon: added inside the L2 normalization's square root (default ``1e-12``).
      dtype: dtype the normalized value is rounded to (default: promoted).
      param_dtype: dtype of ``u`` and ``sigma`` (default ``float32``).
      error_on_non_matrix: raise for Params of rank > 2 instead of flattening them.
      update_stats: initial mode; ``True`` (default) sets ``use_running_average=False``.
      rngs: ``nnx.Rngs``; ``params`` draws each initial ``u`` (normal, stddev 0.01).

    Attributes:
      use_running_average: ``not update_stats``; set by ``Module.eval()``/``train()``.
      batch_stats: ``{path + ('u',): BatchStat (1, n), path + ('sigma',): BatchStat ()}``.

    Call: ``x`` (and the wrapped layer's inputs), ``update_stats`` to override the mode;
    returns the wrapped layer's output.

    Raises:
      ValueError: at construction, a Param of rank > 2 with ``error_on_non_matrix``.
      LayerShapeError / LayerDtypeError: the wrapped layer rejects ``x`` (names this
        wrapper; the Variables are left unchanged).

    >>> import jax.numpy as jnp, numpy as np, flaxgraph as nnx
    >>> layer = nnx.SpectralNorm(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), n_steps=20,
    ...                          rngs=nnx.Rngs(1))
    >>> y = layer(jnp.ones((2, 4)))
    >>> s = np.linalg.svd(np.asarray(layer.layer_instance.kernel.value))[1]
    >>> round(float(s[0]), 4)
    1.0
    >>> sorted(layer.batch_stats)
    [('kernel', 'sigma'), ('kernel', 'u')]
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
        """Writes ``w / sigma`` into ``param``; with ``update_stats``, returns the function that stores ``u``/``sigma``."""
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
    """Weight normalization: selected Variables rescaled to unit L2 norm per feature, times a scale.

    Each Variable ``W`` matched by ``variable_filter`` becomes
    ``W * scale / sqrt(sum(W**2, non-feature axes) + epsilon)``, ``scale`` of shape
    ``tuple(W.shape[a] for a in feature_axes)`` (``()`` for ``feature_axes=None``).

    Args:
      layer_instance: the layer to wrap.
      feature_axes: axes with separate norms (default ``-1``); ``None`` for one norm.
      use_scale: multiply by ``scale`` (default True); otherwise ``scales`` is None.
      scale_init: called as ``scale_init(rngs['params'], shape)`` (the stream, no dtype),
        as Flax does; default ``ones`` (float32).
      epsilon: added inside the square root (default ``1e-12``).
      dtype: dtype of the value written (default: promoted from Variable and scale).
      param_dtype: kept for Flax's signature.
      variable_filter: Variables to normalize (default ``nnx.PathContains('kernel')``).
      promote_dtype: kept for Flax's signature.
      rngs: ``nnx.Rngs`` (its ``params`` stream goes to ``scale_init``).

    Attributes:
      scales: ``{variable_path: array}`` (``None`` without ``use_scale``), plain arrays as
        in Flax, so not trained unless made Params.

    Call: ``x`` and further arguments, passed to the wrapped layer; returns its output.

    Raises:
      ValueError: at construction, a feature axis out of range for a selected Variable.
      LayerShapeError / LayerDtypeError: the wrapped layer rejects its inputs (names this
        wrapper; the Variables are left unchanged).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> layer = nnx.WeightNorm(nnx.Conv(3, 8, (3, 3), rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
    >>> layer.scales[('kernel',)].shape, layer(jnp.ones((1, 5, 5, 3))).shape
    ((8,), (1, 5, 5, 8))
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
        # plain arrays from scale_init(rngs['params'], shape), as Flax's (package README)
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
        """Writes the normalized value into ``param`` if ``variable_filter`` selects it."""
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
        targets = _variables(self.layer_instance, lambda path, value: True)
        with _restoring(self, [v for _, v in targets]):
            for path, variable in targets:
                self._weightnorm_inplace(path, variable)
            return self.layer_instance(x, *args, **kwargs)


__all__ = ["SpectralNorm", "WeightNorm"]
