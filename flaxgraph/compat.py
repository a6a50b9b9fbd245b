"""``nnx.compat``: the transforms and graph functions with graph mode and graph updates
fixed on, whatever ``set_graph_mode``/``set_graph_updates`` say.

Each passes ``graph=True`` (and ``graph_updates=True`` where taken) unless the call gives
them, to the function of the same name in ``flaxgraph``::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> m = nnx.Module(); m.a = nnx.Param(jnp.ones(2)); m.b = m.a   # shared
  >>> with nnx.set_graph_mode(False):                                # tree mode ...
  ...   f = nnx.compat.jit(lambda m: m.a.value.sum())                # ... not here
  >>> float(f(m))
  2.0

Source: Flax NNX 0.12 ``nnx.compat``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from flaxgraph import abstract as _abstract
from flaxgraph import views as _views
from flaxgraph.graphlib import descendants as _descendants
from flaxgraph.graphlib import functional as _functional
from flaxgraph.graphlib import split_merge as _split_merge
from flaxgraph.module_class import iter_modules as _iter_modules
from flaxgraph.rnglib.splitting import backup_keys as _backup_keys
from flaxgraph.rnglib.splitting import fork_rngs as _fork_rngs
from flaxgraph.rnglib.splitting import reseed as _reseed
from flaxgraph.rnglib.splitting import split_rngs as _split_rngs
from flaxgraph.transforms import autodiff as _autodiff
from flaxgraph.transforms import checkify as _checkify
from flaxgraph.transforms import compilation as _jit
from flaxgraph.transforms import control as _control
from flaxgraph.transforms import partial as _partial
from flaxgraph.transforms import scan as _scan
from flaxgraph.transforms import shard_map as _shard_map
from flaxgraph.transforms import vmap as _vmap
from flaxgraph.transforms.custom_vjp import custom_vjp as _custom_vjp


def _fixed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with ``graph=True`` (and ``graph_updates=True``) as defaults, where it takes them."""
    try:
        params = inspect.signature(fn.__init__ if isinstance(fn, type) else fn).parameters  # type: ignore[misc]
    except (TypeError, ValueError):  # pragma: no cover - builtins
        params = {}  # type: ignore[assignment]
    fixed = {k: True for k in ("graph", "graph_updates") if k in params}

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        for k, v in fixed.items():
            kwargs.setdefault(k, v)
        return fn(*args, **kwargs)

    return call


jit = _fixed(_jit.jit)
vmap = _fixed(_vmap.vmap)
pmap = _fixed(_vmap.pmap)
scan = _fixed(_scan.scan)
shard_map = _fixed(_shard_map.shard_map)
grad = _fixed(_autodiff.grad)
value_and_grad = _fixed(_autodiff.value_and_grad)
remat = _fixed(_autodiff.remat)
vjp = _fixed(_autodiff.vjp)
jvp = _fixed(_autodiff.jvp)
custom_vjp = _fixed(_custom_vjp)
cond = _fixed(_control.cond)
switch = _fixed(_control.switch)
while_loop = _fixed(_control.while_loop)
fori_loop = _fixed(_control.fori_loop)
eval_shape = _fixed(_control.eval_shape)
cached_partial = _fixed(_partial.cached_partial)
split_rngs = _fixed(_split_rngs)
fork_rngs = _fixed(_fork_rngs)
reseed = _fixed(_reseed)
backup_keys = _fixed(_backup_keys)
split = _fixed(_split_merge.split)
state = _fixed(_split_merge.state)
graphdef = _fixed(_split_merge.graphdef)
clone = _fixed(_split_merge.clone)
flatten = _fixed(_functional.flatten)
iter_graph = _fixed(_descendants.iter_graph)
iter_children = _fixed(_descendants.iter_children)
iter_modules = _fixed(_iter_modules)
recursive_map = _fixed(_descendants.recursive_map)
checkify = _fixed(_checkify.checkify)
view = _fixed(_views.view)
view_info = _fixed(_views.view_info)
get_abstract_model = _fixed(_abstract.get_abstract_model)
