"""Linen interop (``pip install 'flaxgraph[linen]'``; the package README).
Source: Flax NNX 0.12 ``flax.nnx.bridge``."""

try:
    from flax import linen as _linen  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "flaxgraph.bridge (Linen interop) needs the optional flax package (flax==0.12.8), "
        "which is not installed.\nFix: pip install 'flaxgraph[linen]'"
    ) from error

from flaxgraph.bridge import wrappers as wrappers
from flaxgraph.bridge.checkpoints import linen_params_to_state as linen_params_to_state
from flaxgraph.bridge.checkpoints import state_to_linen_params as state_to_linen_params
from flaxgraph.bridge.context import current_context as current_context
from flaxgraph.bridge.context import current_module as current_module
from flaxgraph.bridge.functional_api import Functional as Functional
from flaxgraph.bridge.functional_api import functional as functional
from flaxgraph.bridge.interop import linen_in_bridge_mdl as linen_in_bridge_mdl
from flaxgraph.bridge.interop import nnx_in_bridge_mdl as nnx_in_bridge_mdl
from flaxgraph.bridge.linen_in_nnx import ToNNX as ToNNX
from flaxgraph.bridge.linen_in_nnx import lazy_init as lazy_init
from flaxgraph.bridge.module import AttrPriority as AttrPriority
from flaxgraph.bridge.module import Module as Module
from flaxgraph.bridge.module import Scope as Scope
from flaxgraph.bridge.module import compact as compact
from flaxgraph.bridge.nnx_in_linen import ToLinen as ToLinen
from flaxgraph.bridge.nnx_in_linen import to_linen as to_linen
from flaxgraph.bridge.nnx_in_linen import to_linen_class as to_linen_class
from flaxgraph.bridge.variables import NNXMeta as NNXMeta
from flaxgraph.bridge.variables import with_partitioning as with_partitioning
from flaxgraph.nn import initializers as initializers
