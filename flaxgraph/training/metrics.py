"""Metrics: running statistics of a training or evaluation loop, as Objects.

See the package README, "Metrics". Source: Flax NNX ``nnx.metrics`` (``Metric``,
``MetricState``, ``Average``, ``Welford``, ``Statistics``, ``Accuracy``, ``MultiMetric``;
0.12); T. Chan, G. Golub, R. LeVeque, "Updating formulae and a pairwise algorithm for
computing sample variances" (1979).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from flaxgraph.filterlib import Filter
from flaxgraph.graphlib.split_merge import split as graph_split
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.variablelib.variable import Variable, is_variable

A = TypeVar("A")

__all__ = ["Accuracy", "Average", "Metric", "MetricState", "MultiMetric", "Statistics", "Welford"]


class MetricState(Variable[A]):
    """The kind of the Variables holding a metric's running state."""


class Metric(Pytree):
    """Base class of metrics: subclasses implement ``update``, ``compute`` and ``reset``.

    Their running state is ``MetricState`` Variables (replaced through ``.value``);
    ``update`` ignores the keywords it does not use.

    Raises:
      NotImplementedError: ``Metric()`` itself or a subclass without its own ``__init__``
        is instantiated, or an unimplemented method is called.
    """

    def __init__(self) -> None:
        raise NotImplementedError(
            f"{type(self).__name__} must override __init__() (create its MetricState "
            "Variables there)."
        )

    def reset(self) -> None:
        """Returns the metric to its initial state, in place."""
        raise NotImplementedError(f"{type(self).__name__} must implement reset()")

    def update(self, **kwargs: Any) -> None:
        """Accumulates one batch, in place; unused keyword arguments are ignored."""
        raise NotImplementedError(f"{type(self).__name__} must implement update()")

    def compute(self) -> Any:
        """Returns the metric's value for everything accumulated since the last reset."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute()")

    def split(self, *filters: Filter) -> tuple[Any, ...]:
        """``nnx.split(self, *filters)``: the metric's ``GraphDef`` and its state(s).

        Raises ``ValueError`` as ``nnx.split`` does (a leaf no filter matches).

        >>> import jax.numpy as jnp, flaxgraph as nnx
        >>> avg = nnx.metrics.Average()
        >>> avg.update(values=jnp.array([1.0, 3.0]))
        >>> graphdef, state = avg.split()
        >>> nnx.merge(graphdef, state).compute()
        Array(2., dtype=float32)
        """
        return graph_split(self, *filters)


def _array(value: Any) -> jax.Array:
    return jnp.asarray(value.raw_value if is_variable(value) else value)


def _state(dtype: Any) -> MetricState[jax.Array]:
    return MetricState(jnp.array(0, dtype=dtype))


def _zero(*states: MetricState[jax.Array]) -> None:
    for state in states:
        state.value = jnp.zeros_like(state.value)


def _argument(kwargs: dict[str, Any], argname: str, metric: str) -> jax.Array:
    if argname not in kwargs:
        raise TypeError(
            f"{metric}.update expected the keyword argument {argname!r}, got "
            f"{sorted(kwargs) or 'none'}.\nFix: pass {argname}=..., or create the metric "
            f"with the argument name you pass ({metric}(argname='loss'))."
        )
    return _array(kwargs[argname])


def _mask(mask: Any, shape: tuple[int, ...], metric: str, what: str) -> jax.Array | None:
    """``mask`` (``None`` or broadcastable to ``shape``) as a bool array of ``shape``."""
    if mask is None:
        return None
    mask = _array(mask)
    try:
        return jnp.broadcast_to(mask != 0, shape)
    except ValueError:
        raise ValueError(
            f"{metric}.update: mask of shape {mask.shape} does not broadcast to the shape "
            f"of {what}, {shape}.\nFix: pass a mask with the shape of {what} (or one that "
            "broadcasts to it, e.g. with trailing axes of size 1)."
        ) from None


class Average(Metric):
    """The mean of every value passed so far.

    Args:
      argname: the ``update`` keyword holding the values (default ``'values'``).

    ``update(mask=None, **{argname: values})``: a scalar or an array of any shape (each
    element counts, or those where ``mask`` is nonzero); ``compute()`` returns a
    ``float32`` scalar, ``nan`` before any update. State: ``total`` (float32), ``count``
    (int32).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> avg = nnx.metrics.Average()
    >>> avg.update(values=jnp.array([1, 2, 3, 4]))
    >>> avg.update(values=jnp.array([11, 50, 0, 0]), mask=jnp.array([1, 0, 0, 0]))
    >>> avg.compute()
    Array(4.2, dtype=float32)
    """

    def __init__(self, argname: str = "values"):
        self.argname = argname
        self.total, self.count = _state(jnp.float32), _state(jnp.int32)

    def reset(self) -> None:
        """Returns the metric to its initial, empty state."""
        _zero(self.total, self.count)

    def update(self, mask: Any = None, **kwargs: Any) -> None:
        """Adds ``values`` (the ``argname`` keyword) to the running mean; with ``mask``, only where it is nonzero.

        Raises:
          TypeError: the keyword ``argname`` is missing.
          ValueError: ``mask`` does not broadcast to the values, or is given with a Python scalar.
        """
        raw = kwargs.get(self.argname)
        if mask is not None and isinstance(raw, (int, float)):
            raise ValueError(
                f"{type(self).__name__}.update: if mask is provided, {self.argname} should be a "
                f"jax array (one value per masked entry), got the Python scalar {raw!r}.\nFix: "
                f"pass {self.argname} as an array of the mask's shape, or drop the mask."
            )
        values = _argument(kwargs, self.argname, type(self).__name__)
        self._add(values, _mask(mask, values.shape, type(self).__name__, self.argname))

    def _add(self, values: jax.Array, mask: jax.Array | None) -> None:
        if mask is None:
            total, count = values.sum(dtype=jnp.float32), jnp.int32(values.size)
        else:
            total = jnp.where(mask, values, 0).sum(dtype=jnp.float32)
            count = mask.sum(dtype=jnp.int32)
        self.total.value = self.total.value + total
        self.count.value = self.count.value + count

    def compute(self) -> jax.Array:
        """The mean over every update since the last ``reset``."""
        return self.total.value / self.count.value


@partial(
    jax.tree_util.register_dataclass,
    data_fields=["mean", "standard_error_of_mean", "standard_deviation"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True, slots=True)
class Statistics:
    """What ``Welford.compute`` returns: three float32 scalars in a frozen dataclass that is a JAX pytree.

    >>> import dataclasses, jax.numpy as jnp, flaxgraph as nnx
    >>> stats = nnx.metrics.Statistics(jnp.float32(1), jnp.float32(0), jnp.float32(0))
    >>> sorted(dataclasses.asdict(stats.replace(mean=jnp.float32(2))))
    ['mean', 'standard_deviation', 'standard_error_of_mean']
    """

    mean: jax.Array
    standard_error_of_mean: jax.Array
    standard_deviation: jax.Array

    def replace(self, **changes: jax.Array) -> Statistics:
        """A copy with the given fields changed (``TypeError`` for a keyword that names no field)."""
        return dataclasses.replace(self, **changes)


class Welford(Metric):
    """Running mean, standard deviation and standard error of the mean, numerically stable.

    Args:
      argname: the ``update`` keyword holding the values (default ``'values'``).

    ``update`` takes a scalar or an array (and an optional ``mask``, which Flax 0.12
    ignores); batches merge by the parallel Welford update. ``compute()`` returns
    ``Statistics(mean, standard_error_of_mean, standard_deviation)``: the population
    deviation, ``standard_error = standard_deviation / sqrt(n)``; before any update mean 0
    and ``nan``. State: ``count`` (int32), ``mean``, ``m2`` (float32).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> w = nnx.metrics.Welford()
    >>> w.update(values=jnp.array([1.0, 2.0, 3.0, 4.0]))
    >>> w.compute().standard_deviation
    Array(1.118034, dtype=float32)
    """

    def __init__(self, argname: str = "values"):
        self.argname = argname
        self.count, self.mean, self.m2 = _state(jnp.int32), _state(jnp.float32), _state(jnp.float32)

    def reset(self) -> None:
        """Returns the metric to its initial, empty state."""
        _zero(self.count, self.mean, self.m2)

    def update(self, mask: Any = None, **kwargs: Any) -> None:
        """Adds ``values`` (the ``argname`` keyword, cast to float32); with ``mask``, only where it is nonzero.

        Raises:
          TypeError: the keyword ``argname`` is missing.
          ValueError: ``mask`` does not broadcast to the values' shape.
        """
        values = _argument(kwargs, self.argname, type(self).__name__).astype(jnp.float32)
        selected = _mask(mask, values.shape, type(self).__name__, self.argname)
        if selected is None:
            if values.size == 0:
                return
            selected = jnp.ones(values.shape, dtype=bool)
        n_b = selected.sum(dtype=jnp.int32)
        nb = n_b.astype(jnp.float32)
        mean_b = jnp.where(selected, values, 0.0).sum() / jnp.maximum(nb, 1.0)
        m2_b = jnp.where(selected, (values - mean_b) ** 2, 0.0).sum()
        n_a = self.count.value.astype(jnp.float32)
        n = jnp.maximum(n_a + nb, 1.0)  # an empty selection leaves the state as it is
        delta = mean_b - self.mean.value
        self.mean.value = self.mean.value + delta * (nb / n)
        self.m2.value = self.m2.value + m2_b + delta**2 * (n_a * nb / n)
        self.count.value = self.count.value + n_b

    def compute(self) -> Statistics:
        """The ``Statistics`` over every update since the last ``reset``."""
        n = self.count.value.astype(jnp.float32)
        std = jnp.sqrt(self.m2.value / n)
        return Statistics(self.mean.value, std / jnp.sqrt(n), std)


def _as_float_text(value: object) -> str:
    try:
        return repr(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "0.5"


class Accuracy(Average):
    """The fraction of correct predictions so far.

    Args:
      threshold: ``None``: multi-class, ``logits`` ``(..., num_classes)``, integer
        ``labels`` ``(...)``, prediction ``argmax(logits, -1)``. A ``float``: binary,
        ``logits`` and integer or bool ``labels`` of one shape, prediction
        ``logits >= threshold``, positive label ``> 0``.
      argname: kept for Flax compatibility (``update`` takes ``logits`` and ``labels``).

    ``update(logits=..., labels=..., mask=None)``; ``compute()`` returns a float32 scalar
    in [0, 1] (``nan`` before any update).

    Raises:
      TypeError: ``threshold`` is neither ``None`` nor a ``float`` (an int, bool or
        ``np.float32`` is refused, as in Flax; ``np.float64`` is a float).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> acc = nnx.metrics.Accuracy()
    >>> acc.update(logits=jnp.array([[0.9, 0.1], [0.3, 0.7]]), labels=jnp.array([0, 0]))
    >>> acc.compute()
    Array(0.5, dtype=float32)
    >>> binary = nnx.metrics.Accuracy(threshold=0.5)
    >>> binary.update(logits=jnp.array([0.2, 0.7, 0.9]), labels=jnp.array([0, 1, 0]))
    >>> binary.compute()
    Array(0.6666667, dtype=float32)
    """

    def __init__(self, threshold: float | None = None, argname: str = "values"):
        if threshold is not None and not isinstance(threshold, float):
            raise TypeError(
                f"Expected threshold to be a float, got {type(threshold)}: "
                f"Accuracy(threshold={threshold!r}). Pass a Python float (e.g. "
                f"threshold={_as_float_text(threshold)}) for binary classification, or "
                "None for multi-class."
            )
        super().__init__(argname)
        self.threshold = threshold

    def update(  # type: ignore[override]
        self, *, logits: Any, labels: Any, mask: Any = None, **_: Any
    ) -> None:
        """Adds a batch of ``logits`` and ``labels`` (see the class); with ``mask``, only where it is nonzero.

        Raises:
          TypeError: ``logits`` or ``labels`` is missing.
          ValueError: the shapes of ``logits``, ``labels`` or ``mask`` do not fit, or the
            labels are not integers (or bools, with a threshold).
        """
        logits, labels = _array(logits), _array(labels)
        if self.threshold is None:
            if logits.shape[:-1] != labels.shape:
                raise ValueError(
                    "For multi-class classification, expected logits.ndim==labels.ndim+1: "
                    "Accuracy (multi-class) expects logits of shape (..., num_classes) and "
                    "labels of shape (...): logits.ndim == labels.ndim + 1 and "
                    f"logits.shape[:-1] == labels.shape, got shapes "
                    f"{logits.shape} and {labels.shape}.\nFix: for binary classification "
                    "with one logit per example, use Accuracy(threshold=...)."
                )
            if not jnp.issubdtype(labels.dtype, jnp.integer):
                raise ValueError(
                    f"Accuracy expects integer class labels, got dtype {labels.dtype}."
                )
            correct = jnp.argmax(logits, axis=-1) == labels
        else:
            if logits.shape != labels.shape:
                raise ValueError(
                    "For binary classification, expected logits.ndim==labels.ndim: "
                    "Accuracy (binary, with a threshold) expects logits and labels of the "
                    f"same rank and shape, got shapes {logits.shape} and {labels.shape}.\nFix: for "
                    "multi-class logits, use Accuracy() without a threshold."
                )
            if not (jnp.issubdtype(labels.dtype, jnp.integer) or labels.dtype == jnp.bool_):
                raise ValueError(
                    f"Accuracy expects integer (0/1) or bool labels, got dtype {labels.dtype}."
                )
            correct = (logits >= self.threshold) == (labels > 0)
        self._add(correct, _mask(mask, labels.shape, type(self).__name__, "labels"))


class MultiMetric(Metric):
    """Several metrics updated and computed together.

    Args:
      **metrics: the metrics by name; each becomes an attribute (``multi.accuracy``).

    ``update(**kwargs)`` passes every keyword to every metric; a ``mask`` array goes to
    all, a ``{name: mask}`` dict to the metrics it names. ``compute()`` returns
    ``{name: metric.compute()}`` in order; ``reset()`` resets them all.

    Raises:
      TypeError: a value is not a ``Metric``.
      ValueError: a name is taken by a ``MultiMetric`` attribute or starts with an
        underscore.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> metrics = nnx.MultiMetric(
    ...     accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average('loss'))
    >>> @nnx.jit
    ... def eval_step(metrics, logits, labels, loss):
    ...   metrics.update(logits=logits, labels=labels, loss=loss)
    >>> eval_step(metrics, jnp.array([[0.1, 0.9], [0.8, 0.2]]), jnp.array([1, 1]), 0.5)
    >>> {k: float(v) for k, v in metrics.compute().items()}
    {'accuracy': 0.5, 'loss': 0.5}
    """

    def __init__(self, **metrics: Metric):
        self._metric_names = tuple(metrics)
        for name, metric in metrics.items():
            if not isinstance(metric, Metric):
                raise TypeError(
                    f"MultiMetric({name}=...) expects an nnx.metrics.Metric, got a "
                    f"{type(metric).__name__}."
                )
            if name.startswith("_") or hasattr(type(self), name):
                raise ValueError(
                    f"MultiMetric cannot hold a metric named {name!r}: the name is reserved "
                    "(a method or attribute of MultiMetric, or private). Pick another name."
                )
            setattr(self, name, metric)

    def reset(self) -> None:
        """Returns the metric to its initial, empty state."""
        for name in self._metric_names:
            getattr(self, name).reset()

    def update(self, **updates: Any) -> None:
        """Passes the keywords to every metric's ``update``; a ``mask`` dict gives each named metric its own.

        Raises:
          ValueError: a ``mask`` dict names no metric of this ``MultiMetric`` (Flax ignores it).
        """
        mask = updates.pop("mask", None)
        if isinstance(mask, dict):
            unknown = sorted(set(mask) - set(self._metric_names))
            if unknown:
                raise ValueError(
                    f"MultiMetric.update: mask names metrics that do not exist: {unknown}; "
                    f"the metrics are {list(self._metric_names)}.\nFix: key the mask dict by "
                    "the names given to MultiMetric(...)."
                )
        for name in self._metric_names:
            metric_mask = mask.get(name) if isinstance(mask, dict) else mask
            if metric_mask is None:
                getattr(self, name).update(**updates)
            else:
                getattr(self, name).update(mask=metric_mask, **updates)

    def compute(self) -> dict[str, Any]:
        """``{name: metric.compute()}`` for every metric, in order."""
        return {name: getattr(self, name).compute() for name in self._metric_names}
