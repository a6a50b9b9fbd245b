"""The wrappers at Flax's module path. Source: Flax NNX 0.12 ``flax.nnx.bridge.wrappers``."""

from flaxgraph.bridge.functional_api import Functional as Functional
from flaxgraph.bridge.functional_api import functional as functional
from flaxgraph.bridge.linen_in_nnx import ToNNX as ToNNX
from flaxgraph.bridge.linen_in_nnx import current_linen_module as current_linen_module
from flaxgraph.bridge.linen_in_nnx import lazy_init as lazy_init
from flaxgraph.bridge.nnx_in_linen import ToLinen as ToLinen
from flaxgraph.bridge.nnx_in_linen import linen_rngs_dict as linen_rngs_dict
from flaxgraph.bridge.nnx_in_linen import to_linen as to_linen
from flaxgraph.bridge.nnx_in_linen import to_linen_class as to_linen_class
