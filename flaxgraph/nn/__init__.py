"""Neural-network layers, pooling, activation functions and initializers.

See the package README (``flaxgraph/nn/README.md``). Source: Flax NNX ``flax.nnx.nn`` (0.12).
"""

from flaxgraph.nn import initializers as initializers
from flaxgraph.nn.activations import PReLU as PReLU
from flaxgraph.nn.activations import celu as celu
from flaxgraph.nn.activations import elu as elu
from flaxgraph.nn.activations import gelu as gelu
from flaxgraph.nn.activations import glu as glu
from flaxgraph.nn.activations import hard_sigmoid as hard_sigmoid
from flaxgraph.nn.activations import hard_silu as hard_silu
from flaxgraph.nn.activations import hard_swish as hard_swish
from flaxgraph.nn.activations import hard_tanh as hard_tanh
from flaxgraph.nn.activations import identity as identity
from flaxgraph.nn.activations import leaky_relu as leaky_relu
from flaxgraph.nn.activations import log_sigmoid as log_sigmoid
from flaxgraph.nn.activations import log_softmax as log_softmax
from flaxgraph.nn.activations import logsumexp as logsumexp
from flaxgraph.nn.activations import mish as mish
from flaxgraph.nn.activations import one_hot as one_hot
from flaxgraph.nn.activations import relu as relu
from flaxgraph.nn.activations import relu6 as relu6
from flaxgraph.nn.activations import selu as selu
from flaxgraph.nn.activations import sigmoid as sigmoid
from flaxgraph.nn.activations import silu as silu
from flaxgraph.nn.activations import soft_sign as soft_sign
from flaxgraph.nn.activations import softmax as softmax
from flaxgraph.nn.activations import softplus as softplus
from flaxgraph.nn.activations import standardize as standardize
from flaxgraph.nn.activations import swish as swish
from flaxgraph.nn.activations import tanh as tanh
from flaxgraph.nn.attention import MultiHeadAttention as MultiHeadAttention
from flaxgraph.nn.attention_ops import combine_masks as combine_masks
from flaxgraph.nn.attention_ops import dot_product_attention as dot_product_attention
from flaxgraph.nn.attention_ops import (
    dot_product_attention_weights as dot_product_attention_weights,
)
from flaxgraph.nn.attention_ops import make_attention_mask as make_attention_mask
from flaxgraph.nn.attention_ops import make_causal_mask as make_causal_mask
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
from flaxgraph.nn.pooling import avg_pool as avg_pool
from flaxgraph.nn.pooling import max_pool as max_pool
from flaxgraph.nn.pooling import min_pool as min_pool
from flaxgraph.nn.pooling import pool as pool
from flaxgraph.nn.recurrent import GRUCell as GRUCell
from flaxgraph.nn.recurrent import LSTMCell as LSTMCell
from flaxgraph.nn.recurrent import OptimizedLSTMCell as OptimizedLSTMCell
from flaxgraph.nn.recurrent import RNNCellBase as RNNCellBase
from flaxgraph.nn.recurrent import SimpleCell as SimpleCell
from flaxgraph.nn.rnn import RNN as RNN
from flaxgraph.nn.rnn import Bidirectional as Bidirectional
from flaxgraph.nn.stochastic import Dropout as Dropout
