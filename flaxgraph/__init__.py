"""flaxgraph: reference-semantics neural-network objects for JAX.

Write ``import flaxgraph as nnx``: the public names follow Flax NNX.
"""

import builtins as _builtins
import types as _types
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from flaxgraph import compat as compat
from flaxgraph import deprecations as deprecations
from flaxgraph import extract as extract
from flaxgraph import filterlib as filterlib
from flaxgraph import graphlib as graphlib
from flaxgraph import ids as ids
from flaxgraph import modes as modes
from flaxgraph import nn as nn
from flaxgraph import proxy_caller as proxy_caller
from flaxgraph import pytreelib as object  # as in Flax: ``nnx.object`` is pytreelib
from flaxgraph import pytreelib as pytreelib
from flaxgraph import reprlib as reprlib
from flaxgraph import rnglib as rnglib
from flaxgraph import statelib as statelib
from flaxgraph import summary as summary
from flaxgraph import testing as testing
from flaxgraph import tracers as tracers
from flaxgraph import transforms as transforms
from flaxgraph import traversals as traversals
from flaxgraph import variablelib as variablelib
from flaxgraph import visualization as visualization
from flaxgraph.abstract import abstract_with_sharding as abstract_with_sharding
from flaxgraph.abstract import as_abstract as as_abstract
from flaxgraph.abstract import get_abstract_model as get_abstract_model
from flaxgraph.capturing import capture as capture
from flaxgraph.config import Flag as Flag
from flaxgraph.containers import Dict as Dict
from flaxgraph.containers import List as List
from flaxgraph.containers import Sequential as Sequential
from flaxgraph.errors import FlaxgraphError as FlaxgraphError
from flaxgraph.errors import GraphStructureError as GraphStructureError
from flaxgraph.errors import IdentityHashWarning as IdentityHashWarning
from flaxgraph.errors import InvalidFilterError as InvalidFilterError
from flaxgraph.errors import SharedReferenceError as SharedReferenceError
from flaxgraph.errors import StaticAttributeError as StaticAttributeError
from flaxgraph.errors import TraceContextError as TraceContextError
from flaxgraph.errors import UnmatchedLeafError as UnmatchedLeafError
from flaxgraph.extract import NodeStates as NodeStates
from flaxgraph.extract import from_tree as from_tree
from flaxgraph.extract import prefix as prefix
from flaxgraph.extract import to_tree as to_tree
from flaxgraph.filterlib import All as All
from flaxgraph.filterlib import Any as Any
from flaxgraph.filterlib import Everything as Everything
from flaxgraph.filterlib import Not as Not
from flaxgraph.filterlib import Nothing as Nothing
from flaxgraph.filterlib import OfType as OfType
from flaxgraph.filterlib import PathContains as PathContains
from flaxgraph.filterlib import WithTag as WithTag
from flaxgraph.flax_surface import install as _install_flax_surface
from flaxgraph.flax_surface.drop_in import install_as_flax_nnx as install_as_flax_nnx
from flaxgraph.flax_surface.node_protocol import (
    register_graph_node_type as register_graph_node_type,
)
from flaxgraph.graphlib.contexts import MergeContext as MergeContext
from flaxgraph.graphlib.contexts import SplitContext as SplitContext
from flaxgraph.graphlib.contexts import UpdateContext as UpdateContext
from flaxgraph.graphlib.contexts import current_update_context as current_update_context
from flaxgraph.graphlib.contexts import merge_context as merge_context
from flaxgraph.graphlib.contexts import split_context as split_context
from flaxgraph.graphlib.contexts import update_context as update_context
from flaxgraph.graphlib.descendants import find_duplicates as find_duplicates
from flaxgraph.graphlib.descendants import iter_children as iter_children
from flaxgraph.graphlib.descendants import iter_graph as iter_graph
from flaxgraph.graphlib.descendants import iter_module_children as iter_module_children
from flaxgraph.graphlib.descendants import recursive_map as recursive_map
from flaxgraph.graphlib.diff import graphdef_diff as graphdef_diff
from flaxgraph.graphlib.functional import as_pure as as_pure
from flaxgraph.graphlib.functional import flatten as flatten
from flaxgraph.graphlib.functional import map as map
from flaxgraph.graphlib.functional import pure as pure
from flaxgraph.graphlib.functional import unflatten as unflatten
from flaxgraph.graphlib.functional import unpack as unpack
from flaxgraph.graphlib.graph_state import GraphState as GraphState
from flaxgraph.graphlib.graph_state import PureState as PureState
from flaxgraph.graphlib.graphdefs import GraphDef as GraphDef
from flaxgraph.graphlib.inplace import pop as pop
from flaxgraph.graphlib.inplace import update as update
from flaxgraph.graphlib.pure_methods import call as call
from flaxgraph.graphlib.split_merge import clone as clone
from flaxgraph.graphlib.split_merge import graphdef as graphdef
from flaxgraph.graphlib.split_merge import merge as merge
from flaxgraph.graphlib.split_merge import split as split
from flaxgraph.graphlib.split_merge import state as state
from flaxgraph.graphlib.split_merge import variables as variables
from flaxgraph.graphlib.variable_views import set_metadata as set_metadata
from flaxgraph.graphlib.variable_views import vars_as as vars_as
from flaxgraph.graphlib.variable_views import with_vars as with_vars
from flaxgraph.mesh_context import ShardingSpecError as ShardingSpecError
from flaxgraph.mesh_context import logical_axis_rules as logical_axis_rules
from flaxgraph.mesh_context import use_eager_sharding as use_eager_sharding
from flaxgraph.mesh_context import using_eager_sharding as using_eager_sharding
from flaxgraph.modes import set_graph_mode as set_graph_mode
from flaxgraph.modes import set_graph_updates as set_graph_updates
from flaxgraph.module_class import M as M
from flaxgraph.module_class import Module as Module
from flaxgraph.module_class import iter_modules as iter_modules
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
from flaxgraph.nn.initializers import Initializer as Initializer
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
from flaxgraph.partitioning import AxisMetadata as AxisMetadata
from flaxgraph.partitioning import Partitioned as Partitioned
from flaxgraph.partitioning import get_named_sharding as get_named_sharding
from flaxgraph.partitioning import get_partition_spec as get_partition_spec
from flaxgraph.partitioning import with_partitioning as with_partitioning
from flaxgraph.partitioning import with_sharding_constraint as with_sharding_constraint
from flaxgraph.pytreelib.attribute_kinds import Data as Data
from flaxgraph.pytreelib.attribute_kinds import Static as Static
from flaxgraph.pytreelib.attribute_kinds import data as data
from flaxgraph.pytreelib.attribute_kinds import has_data as has_data
from flaxgraph.pytreelib.attribute_kinds import is_data as is_data
from flaxgraph.pytreelib.attribute_kinds import register_data_type as register_data_type
from flaxgraph.pytreelib.attribute_kinds import static as static
from flaxgraph.pytreelib.declarations import check_pytree as check_pytree
from flaxgraph.pytreelib.declarations import dataclass as dataclass
from flaxgraph.pytreelib.objects import Object as Object
from flaxgraph.pytreelib.objects import Pytree as Pytree
from flaxgraph.rnglib.broadcast_mark import BROADCAST as BROADCAST
from flaxgraph.rnglib.rngs import RngCount as RngCount
from flaxgraph.rnglib.rngs import RngKey as RngKey
from flaxgraph.rnglib.rngs import Rngs as Rngs
from flaxgraph.rnglib.rngs import RngState as RngState
from flaxgraph.rnglib.rngs import RngStream as RngStream
from flaxgraph.rnglib.splitting import RngBackups as RngBackups
from flaxgraph.rnglib.splitting import fork_rngs as fork_rngs
from flaxgraph.rnglib.splitting import reseed as reseed
from flaxgraph.rnglib.splitting import restore_rngs as restore_rngs
from flaxgraph.rnglib.splitting import split_rngs as split_rngs
from flaxgraph.rnglib.stream_copy import with_rngs as with_rngs
from flaxgraph.serialization import check_checkpoint as check_checkpoint
from flaxgraph.serialization import load_state as load_state
from flaxgraph.serialization import save_state as save_state
from flaxgraph.statelib import FlatState as FlatState
from flaxgraph.statelib import State as State
from flaxgraph.statelib import filter_state as filter_state
from flaxgraph.statelib import from_flat_state as from_flat_state
from flaxgraph.statelib import map_state as map_state
from flaxgraph.statelib import merge_state as merge_state
from flaxgraph.statelib import replace_by_pure_dict as replace_by_pure_dict
from flaxgraph.statelib import restore_int_paths as restore_int_paths
from flaxgraph.statelib import split_state as split_state
from flaxgraph.statelib import to_flat_state as to_flat_state
from flaxgraph.statelib import to_pure_dict as to_pure_dict
from flaxgraph.summary import tabulate as tabulate
from flaxgraph.training import metrics as metrics
from flaxgraph.training import optimizer as optimizer
from flaxgraph.training.ema import EMA as EMA
from flaxgraph.training.metrics import Metric as Metric
from flaxgraph.training.metrics import MultiMetric as MultiMetric
from flaxgraph.training.optimizer import ModelAndOptimizer as ModelAndOptimizer
from flaxgraph.training.optimizer import OptArray as OptArray
from flaxgraph.training.optimizer import Optimizer as Optimizer
from flaxgraph.training.optimizer import OptState as OptState
from flaxgraph.training.optimizer import OptVariable as OptVariable
from flaxgraph.training.train_state import TrainState as TrainState
from flaxgraph.transforms.aliasing import InconsistentAliasingError as InconsistentAliasingError
from flaxgraph.transforms.aliasing import PrefixError as PrefixError
from flaxgraph.transforms.autodiff import checkpoint as checkpoint
from flaxgraph.transforms.autodiff import grad as grad
from flaxgraph.transforms.autodiff import jvp as jvp
from flaxgraph.transforms.autodiff import remat as remat
from flaxgraph.transforms.autodiff import value_and_grad as value_and_grad
from flaxgraph.transforms.autodiff import vjp as vjp
from flaxgraph.transforms.checkify import checkify as checkify
from flaxgraph.transforms.closure_reads import ClosureReadWarning as ClosureReadWarning
from flaxgraph.transforms.compilation import jit as jit
from flaxgraph.transforms.compilation import jit_partial as jit_partial
from flaxgraph.transforms.control import CarryStructureError as CarryStructureError
from flaxgraph.transforms.control import cond as cond
from flaxgraph.transforms.control import eval_shape as eval_shape
from flaxgraph.transforms.control import fori_loop as fori_loop
from flaxgraph.transforms.control import switch as switch
from flaxgraph.transforms.control import while_loop as while_loop
from flaxgraph.transforms.custom_vjp import custom_vjp as custom_vjp
from flaxgraph.transforms.lift_types import DiffState as DiffState
from flaxgraph.transforms.lift_types import StateAxes as StateAxes
from flaxgraph.transforms.lift_types import StateSharding as StateSharding
from flaxgraph.transforms.make_jaxpr import make_jaxpr as make_jaxpr
from flaxgraph.transforms.metadata_hooks import transform_metadata as transform_metadata
from flaxgraph.transforms.partial import cached_partial as cached_partial
from flaxgraph.transforms.rng_broadcast import RngBroadcastWarning as RngBroadcastWarning
from flaxgraph.transforms.scan import BroadcastChangeWarning as BroadcastChangeWarning
from flaxgraph.transforms.scan import Carry as Carry
from flaxgraph.transforms.scan import scan as scan
from flaxgraph.transforms.shard_map import shard_map as shard_map
from flaxgraph.transforms.vmap import pmap as pmap
from flaxgraph.transforms.vmap import vmap as vmap
from flaxgraph.variablelib.defaults import VarDefaults as VarDefaults
from flaxgraph.variablelib.defaults import var_defaults as var_defaults
from flaxgraph.variablelib.initial_metadata import VariableMetadata as VariableMetadata
from flaxgraph.variablelib.initial_metadata import with_metadata as with_metadata
from flaxgraph.variablelib.names import register_variable_name as register_variable_name
from flaxgraph.variablelib.names import variable_name_from_type as variable_name_from_type
from flaxgraph.variablelib.names import variable_type_from_name as variable_type_from_name
from flaxgraph.variablelib.variable import PARTITION_NAME as PARTITION_NAME
from flaxgraph.variablelib.variable import A as A
from flaxgraph.variablelib.variable import BatchStat as BatchStat
from flaxgraph.variablelib.variable import Cache as Cache
from flaxgraph.variablelib.variable import Intermediate as Intermediate
from flaxgraph.variablelib.variable import Param as Param
from flaxgraph.variablelib.variable import Perturbation as Perturbation
from flaxgraph.variablelib.variable import Variable as Variable
from flaxgraph.views import view as view
from flaxgraph.views import view_info as view_info
from flaxgraph.views import with_attributes as with_attributes
from flaxgraph.visualization import display as display

# Flax NNX's module map, one table in the layer above everything else: it adds Flax's
# names to flaxgraph's modules and creates the modules that only gather names at Flax's
# paths (flaxgraph/flax_surface/table.py).
_install_flax_surface()
graph: _types.ModuleType  # modules the table creates or aliases (typed for type checkers)
helpers: _types.ModuleType
module: _types.ModuleType
spmd: _types.ModuleType


def __getattr__(name: str) -> _builtins.object:  # ``object`` here is nnx.object
    # ``nnx.bridge`` (Linen interop) needs the optional ``flax`` package, so it is
    # imported on first use; flaxgraph/bridge/__init__.py says how to install it.
    if name in ("bridge", "wrappers"):  # as in Flax, ``nnx.wrappers`` is ``bridge.wrappers``
        import importlib

        return importlib.import_module(
            "flaxgraph.bridge" if name == "bridge" else "flaxgraph.bridge.wrappers"
        )
    if name == "VariableState":
        # Flax 0.12 folded VariableState into Variable and keeps the old name as an
        # alias that warns (code written for Flax 0.10/0.11 uses it in ``isinstance``
        # checks and ``is_leaf=`` predicates), so the alias is the class itself.
        import warnings

        warnings.warn(
            "'VariableState' is an alias of 'Variable' (Flax 0.12 folded it into "
            "Variable): use 'nnx.Variable' instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return Variable
    from flaxgraph.flax_surface.missing_names import missing_name_error

    raise missing_name_error("flaxgraph", name)


try:
    __version__ = _version("flaxgraph")
except _PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
