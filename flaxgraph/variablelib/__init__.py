"""Variables: the leaves of the object graph that hold arrays, with their kinds and metadata.

The package README maps the files; this package is Flax NNX's ``variablelib`` module map.
"""

from flaxgraph.mesh_context import use_eager_sharding as use_eager_sharding
from flaxgraph.mesh_context import using_eager_sharding as using_eager_sharding
from flaxgraph.variablelib.defaults import VarDefaults as VarDefaults
from flaxgraph.variablelib.defaults import VarDefaultsContext as VarDefaultsContext
from flaxgraph.variablelib.defaults import var_defaults as var_defaults
from flaxgraph.variablelib.flax_names import VARIABLE_CONTEXT as VARIABLE_CONTEXT
from flaxgraph.variablelib.flax_names import AbstractVariable as AbstractVariable
from flaxgraph.variablelib.flax_names import AddAxisHook as AddAxisHook
from flaxgraph.variablelib.flax_names import AxisIndex as AxisIndex
from flaxgraph.variablelib.flax_names import AxisName as AxisName
from flaxgraph.variablelib.flax_names import CreateValueHook as CreateValueHook
from flaxgraph.variablelib.flax_names import GetValueHook as GetValueHook
from flaxgraph.variablelib.flax_names import GetVariable as GetVariable
from flaxgraph.variablelib.flax_names import HijaxVariableMeta as HijaxVariableMeta
from flaxgraph.variablelib.flax_names import Leaf as Leaf
from flaxgraph.variablelib.flax_names import NewVariable as NewVariable
from flaxgraph.variablelib.flax_names import PyTreeDef as PyTreeDef
from flaxgraph.variablelib.flax_names import RemoveAxisHook as RemoveAxisHook
from flaxgraph.variablelib.flax_names import SetValueHook as SetValueHook
from flaxgraph.variablelib.flax_names import SetVariable as SetVariable
from flaxgraph.variablelib.flax_names import VariableContext as VariableContext
from flaxgraph.variablelib.flax_names import VariableEffect as VariableEffect
from flaxgraph.variablelib.flax_names import VariableMeta as VariableMeta
from flaxgraph.variablelib.flax_names import VariableQDD as VariableQDD
from flaxgraph.variablelib.flax_names import get_variable_p as get_variable_p
from flaxgraph.variablelib.flax_names import is_array_ref as is_array_ref
from flaxgraph.variablelib.flax_names import new_variable_p as new_variable_p
from flaxgraph.variablelib.flax_names import set_variable_p as set_variable_p
from flaxgraph.variablelib.flax_names import variable_effect as variable_effect
from flaxgraph.variablelib.hijax import HijaxVariable as HijaxVariable
from flaxgraph.variablelib.initial_metadata import VariableMetadata as VariableMetadata
from flaxgraph.variablelib.initial_metadata import with_metadata as with_metadata
from flaxgraph.variablelib.names import VariableTypeCache as VariableTypeCache
from flaxgraph.variablelib.names import register_variable_name as register_variable_name
from flaxgraph.variablelib.names import variable_name_from_type as variable_name_from_type
from flaxgraph.variablelib.names import variable_type_from_name as variable_type_from_name
from flaxgraph.variablelib.variable import PARTITION_NAME as PARTITION_NAME
from flaxgraph.variablelib.variable import BatchStat as BatchStat
from flaxgraph.variablelib.variable import Cache as Cache
from flaxgraph.variablelib.variable import Intermediate as Intermediate
from flaxgraph.variablelib.variable import Param as Param
from flaxgraph.variablelib.variable import Perturbation as Perturbation
from flaxgraph.variablelib.variable import Variable as Variable
from flaxgraph.variablelib.variable import is_variable as is_variable

# Flax 0.12 keeps the pre-0.12 name of a Variable's state as an alias of Variable.
VariableState = Variable
