"""Neural-network layers, pooling, activation functions and initializers.

See the package README (``flaxgraph/nn/README.md``). Source: Flax NNX ``flax.nnx.nn`` (0.12).
"""

from flaxgraph.nn import initializers as initializers
from flaxgraph.nn.activations import *  # noqa: F403 (its __all__: Flax's names)
from flaxgraph.nn.activations import mish as mish
from flaxgraph.nn.attention import MultiHeadAttention as MultiHeadAttention
from flaxgraph.nn.attention_ops import *  # noqa: F403 (its __all__)
from flaxgraph.nn.conv import Conv as Conv
from flaxgraph.nn.conv import ConvTranspose as ConvTranspose
from flaxgraph.nn.embed import Embed as Embed
from flaxgraph.nn.errors import LayerDtypeError as LayerDtypeError
from flaxgraph.nn.errors import LayerInputError as LayerInputError
from flaxgraph.nn.errors import LayerShapeError as LayerShapeError
from flaxgraph.nn.linear import Einsum as Einsum
from flaxgraph.nn.linear import Linear as Linear
from flaxgraph.nn.linear import LinearGeneral as LinearGeneral
from flaxgraph.nn.lora import LoRA as LoRA
from flaxgraph.nn.lora import LoRALinear as LoRALinear
from flaxgraph.nn.lora import LoRAParam as LoRAParam
from flaxgraph.nn.normalization import BatchNorm as BatchNorm
from flaxgraph.nn.normalization import GroupNorm as GroupNorm
from flaxgraph.nn.normalization import InstanceNorm as InstanceNorm
from flaxgraph.nn.normalization import LayerNorm as LayerNorm
from flaxgraph.nn.normalization import RMSNorm as RMSNorm
from flaxgraph.nn.normalization_wrappers import SpectralNorm as SpectralNorm
from flaxgraph.nn.normalization_wrappers import WeightNorm as WeightNorm
from flaxgraph.nn.pooling import *  # noqa: F403 (its __all__)
from flaxgraph.nn.recurrent import GRUCell as GRUCell
from flaxgraph.nn.recurrent import LSTMCell as LSTMCell
from flaxgraph.nn.recurrent import OptimizedLSTMCell as OptimizedLSTMCell
from flaxgraph.nn.recurrent import RNNCellBase as RNNCellBase
from flaxgraph.nn.recurrent import SimpleCell as SimpleCell
from flaxgraph.nn.rnn import RNN as RNN
from flaxgraph.nn.rnn import Bidirectional as Bidirectional
from flaxgraph.nn.stochastic import Dropout as Dropout
