"""Flax NNX 0.12.8's module map: each ``flax.nnx`` module, the flaxgraph module answering it,
and the Flax names that module does not define itself.

A row's key is a dotted Flax module; its flaxgraph path is the same with ``flaxgraph`` for
``flax.nnx`` (``flax.nnx.transforms.iteration`` -> ``flaxgraph.transforms.iteration``).
``Row.module`` is the module at that path: the path itself, or the module it is another name
for (``flax.nnx.graph`` is ``flaxgraph.graphlib``). A name is ``"module:attribute"`` (that
flaxgraph object) or a :class:`StandIn` (``stand_ins.py`` makes it). A row with ``doc``
describes a module no file holds: :func:`flaxgraph.flax_surface.install` creates it.

Source: the module map of Flax NNX 0.12.8 (its public source, read for the names only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

__all__ = ["MODULE_MAP", "Row", "StandIn", "flaxgraph_path"]


class StandIn(NamedTuple):
    """A Flax-internal name with no counterpart here: ``kind`` of stand-in, and what to use."""

    kind: Literal["class", "function", "object", "primitive"]
    instead: str


class Row(NamedTuple):
    """One ``flax.nnx`` module: the flaxgraph module answering it and the names added to it."""

    module: str
    names: Mapping[str, str | StandIn] = {}
    doc: str | None = None  # a module no file holds: created with this docstring
    lazy: bool = False  # imported only when asked for (it needs the optional ``flax`` package)


def flaxgraph_path(flax_module: str) -> str:
    """``'flax.nnx.a.b'`` -> ``'flaxgraph.a.b'``: where flaxgraph keeps a Flax module."""
    return "flaxgraph" + flax_module.removeprefix("flax.nnx")


def _from(module: str, names: str) -> dict[str, str]:
    """Each of the space-separated ``names`` as the attribute of that name of ``module``."""
    return {name: f"{module}:{name}" for name in names.split()}


def _stand_ins(
    kind: Literal["class", "function", "object", "primitive"], **instead: str
) -> dict[str, StandIn]:
    return {name: StandIn(kind, what) for name, what in instead.items()}


_HIJAX = (
    "a Variable with hijax=True (nnx.Param(x, hijax=True)), which flaxgraph keeps as a "
    "Ref-backed Variable of its own kind"
)
_WRITE_BACK = "the transforms' own write-back (nnx.jit...)"
_TREE = "(..., graph=False)"
_SURFACE = "flaxgraph.flax_surface"

MODULE_MAP: Mapping[str, Row] = {
    "flax.nnx": Row("flaxgraph"),
    "flax.nnx.bridge": Row("flaxgraph.bridge", lazy=True),
    "flax.nnx.bridge.interop": Row("flaxgraph.bridge.interop", lazy=True),
    "flax.nnx.bridge.module": Row("flaxgraph.bridge.module", lazy=True),
    "flax.nnx.bridge.variables": Row("flaxgraph.bridge.variables", lazy=True),
    "flax.nnx.bridge.wrappers": Row("flaxgraph.bridge.wrappers", lazy=True),
    "flax.nnx.wrappers": Row("flaxgraph.bridge.wrappers", lazy=True),
    "flax.nnx.compat": Row("flaxgraph.compat"),
    "flax.nnx.deprecations": Row("flaxgraph.deprecations"),
    "flax.nnx.extract": Row(
        "flaxgraph.extract",
        {
            **_from(
                f"{_SURFACE}.extract_records",
                "ExtractIndex GraphDefState Index KeepFn KeyPath Leaf Mask Opaque OrderedDict Prefix "
                "PrefixMapping broadcast_prefix broadcast_prefix2 broadcast_prefix_map "
                "check_same_variables copy_var_structure extract filter_kwargs find insert labeled "
                "mask_at replace_at slice_at snapshot to_masked treemap_copy_args "
                "update_carry_variables variable_changed",
            ),
            "TreeState": "flaxgraph.extract:NodeStates",  # Flax 0.12's name
            **_stand_ins(
                "class",
                Updates=_WRITE_BACK,
            ),
            **_stand_ins(
                "function",
                get_updates=_WRITE_BACK,
                apply_updates=_WRITE_BACK,
                check_consistent_aliasing="the transforms' own check (InconsistentAliasingError)",
                check_consistent_aliasing2="the transforms' own check (InconsistentAliasingError)",
                check_no_aliases="the transforms' own check (SharedReferenceError)",
                check_prefix="the transforms' own check (PrefixError)",
                to_tree2="nnx.to_tree",
                from_tree2="nnx.from_tree",
            ),
        },
    ),
    "flax.nnx.filterlib": Row("flaxgraph.filterlib"),
    "flax.nnx.graph": Row("flaxgraph.graphlib"),  # Flax's older name of graphlib
    "flax.nnx.graphlib": Row(
        "flaxgraph.graphlib",
        {
            **_from(
                f"{_SURFACE}.graphlib_records",
                "ArrayRefDef AttrType DataElem GenericPytree IndexesPytreeDef LEAF_ATTR LeafAttr "
                "LeafType NODE_ATTR NO_UPDATE Names NodeAttr NodeDefType NodeImplBase "
                "PYTREE_NODE_IMPL PytreeNodeImpl REPEATED Repeated Static StaticElem graph_pop "
                "jax_to_nnx_path",
            ),
            **_from(
                f"{_SURFACE}.node_protocol",
                "GRAPH_REGISTRY PYTREE_REGISTRY GraphNodeImpl NodeImpl get_node_impl "
                "get_node_impl_for_type is_graph_node is_node is_node_leaf is_node_type "
                "is_pytree_node register_graph_node_type register_pytree_node_type",
            ),
            "GraphFlatState": "flaxgraph.statelib:FlatState",
            "Index": "builtins:int",
            "PythonRefMap": "flaxgraph.graphlib.refmap:RefMap",
            "cached_partial": "flaxgraph.transforms.partial:cached_partial",
            "_flatten_pytree": "flaxgraph.graphlib.registry:flatten_pytree",  # Flax's private
            "_unflatten_pytree": "flaxgraph.graphlib.registry:unflatten_pytree",  # names
            **_stand_ins(
                "class",
                GraphContext="nnx.split_context / nnx.update_context",
                StaticCache="nnx.cached_partial",
                UpdateContextManager="nnx.update_context",
            ),
            **_stand_ins("object", GRAPH_CONTEXT="nnx.split_context / nnx.update_context"),
            **_stand_ins("function", static_cache="nnx.cached_partial"),
        },
    ),
    "flax.nnx.helpers": Row(
        "flaxgraph.helpers",
        {
            **_from("flaxgraph.containers", "Dict List Sequential"),
            **_from("flaxgraph.training.train_state", "TrainState"),
            **_from(f"{_SURFACE}.module_records", "ModuleDefApply has_keyword_arg"),
        },
        doc="Flax NNX's ``nnx.helpers``: ``List``, ``Dict``, ``Sequential``, ``TrainState``.",
    ),
    "flax.nnx.ids": Row("flaxgraph.ids"),
    "flax.nnx.module": Row(
        "flaxgraph.module",
        {
            **_from("flaxgraph.module_class", "M Module iter_modules"),
            **_from("flaxgraph.views", "view view_info with_attributes"),
            **_from("flaxgraph.capturing", "capture"),
            **_from("flaxgraph.graphlib.descendants", "iter_children iter_module_children"),
            **_from("flaxgraph.nn.common", "first_from"),
            **_from(
                f"{_SURFACE}.module_records", "ModuleMeta StateMapping tuple_init tuple_reduce"
            ),
        },
        doc="Flax NNX's ``nnx.module``: ``Module`` and the functions Flax keeps beside it.",
    ),
    "flax.nnx.nn": Row("flaxgraph.nn"),
    "flax.nnx.nn.activations": Row("flaxgraph.nn.activations"),
    "flax.nnx.nn.attention": Row("flaxgraph.nn.attention"),
    "flax.nnx.nn.dtypes": Row("flaxgraph.nn.dtypes"),
    "flax.nnx.nn.initializers": Row("flaxgraph.nn.initializers"),
    "flax.nnx.nn.linear": Row("flaxgraph.nn.linear"),
    "flax.nnx.nn.lora": Row("flaxgraph.nn.lora"),
    "flax.nnx.nn.normalization": Row("flaxgraph.nn.normalization"),
    "flax.nnx.nn.recurrent": Row("flaxgraph.nn.recurrent"),
    "flax.nnx.nn.stochastic": Row("flaxgraph.nn.stochastic"),
    "flax.nnx.object": Row("flaxgraph.pytreelib"),  # Flax's older name of pytreelib
    "flax.nnx.proxy_caller": Row("flaxgraph.proxy_caller"),
    "flax.nnx.pytreelib": Row(
        "flaxgraph.pytreelib",
        {
            **_from(
                f"{_SURFACE}.pytreelib_records",
                "ArrayRepr BUILDING_DOCS MutableArrayRepr OBJECT_CONTEXT ObjectContext "
                "PytreeMeta VariableRepr",
            ),
            "ObjectMeta": f"{_SURFACE}.pytreelib_records:PytreeMeta",
            "DATA_REGISTRY": "flaxgraph.pytreelib.attribute_kinds:DATA_TYPES",
        },
    ),
    "flax.nnx.reprlib": Row("flaxgraph.reprlib"),
    "flax.nnx.rnglib": Row("flaxgraph.rnglib"),
    "flax.nnx.spmd": Row(
        "flaxgraph.spmd",
        {
            **_from(
                "flaxgraph.partitioning",
                "PARTITION_NAME AxisMetadata Partitioned get_named_sharding get_partition_spec "
                "get_var_pspec map_boxes with_partitioning with_sharding_constraint",
            ),
            **_from("flaxgraph.abstract", "abstract_with_sharding as_abstract get_abstract_model"),
            **_from("flaxgraph.variablelib.tree_axes", "add_axis remove_axis"),
        },
        doc="Flax NNX's ``nnx.spmd``: the sharding helpers, abstract models and "
        '``add_axis``/``remove_axis`` (the "Axis Metadata" FLIP, flax#2434).',
    ),
    "flax.nnx.statelib": Row("flaxgraph.statelib"),
    "flax.nnx.summary": Row("flaxgraph.summary"),
    "flax.nnx.tracers": Row("flaxgraph.tracers"),
    "flax.nnx.training": Row("flaxgraph.training"),
    "flax.nnx.training.ema": Row("flaxgraph.training.ema"),
    "flax.nnx.training.metrics": Row("flaxgraph.training.metrics"),
    "flax.nnx.training.optimizer": Row("flaxgraph.training.optimizer"),
    "flax.nnx.transforms": Row("flaxgraph.transforms"),
    "flax.nnx.transforms.autodiff": Row(
        "flaxgraph.transforms.autodiff",
        {
            "AxisName": "collections.abc:Hashable",
            "CustomVjp": "flaxgraph.transforms.custom_vjp:custom_vjp",
            "SimpleCustomVjp": "flaxgraph.transforms.custom_vjp:custom_vjp",
            "custom_vjp": "flaxgraph.transforms.custom_vjp:custom_vjp",
            **_stand_ins(
                "class",
                GradFn="nnx.grad",
                FwdFn="nnx.custom_vjp(...).defvjp",
                BwdFn="nnx.custom_vjp(...).defvjp",
                CustomVjpFnWrapper="nnx.custom_vjp",
                SimpleGradFn=f"nnx.grad{_TREE}",
                SimpleVjpFn=f"nnx.vjp{_TREE}",
                SimpleJvpFn=f"nnx.jvp{_TREE}",
                SimpleRematFn=f"nnx.remat{_TREE}",
                SimpleCustomVjpFn=f"nnx.custom_vjp{_TREE}",
                SimpleFwdFn=f"nnx.custom_vjp{_TREE}.defvjp",
                SimpleBwdFn=f"nnx.custom_vjp{_TREE}.defvjp",
            ),
        },
    ),
    "flax.nnx.transforms.compilation": Row(
        "flaxgraph.transforms.compilation",
        {
            "AxisName": "collections.abc:Hashable",
            "Specs": "typing:Any",
            "Compiled": "flaxgraph.transforms.compiled:AotCompiled",
            "Traced": "flaxgraph.transforms.compiled:TracedJit",
            "Stage": f"{_SURFACE}.transforms_records:Stage",
            # tree mode (graph=False) returns the same classes as graph mode
            "SimpleJitWrapped": "flaxgraph.transforms.compilation:JitWrapped",
            "SimpleJitPartialWrapped": "flaxgraph.transforms.compilation:JitWrapped",
            "SimpleCompiled": "flaxgraph.transforms.compiled:AotCompiled",
            "SimplePartialCompiled": "flaxgraph.transforms.compiled:AotCompiled",
            "SimpleLowered": "flaxgraph.transforms.compiled:Lowered",
            "SimplePartialLowered": "flaxgraph.transforms.compiled:Lowered",
            "SimpleTraced": "flaxgraph.transforms.compiled:TracedJit",
            "SimplePartialTraced": "flaxgraph.transforms.compiled:TracedJit",
            **_stand_ins(
                "class",
                JitFn="nnx.jit",
                ShardMapFn="nnx.shard_map",
                SimpleJitFn=f"nnx.jit{_TREE}",
                SimpleJitPartialFn=f"nnx.jit_partial{_TREE}",
                SimpleShardMapFn=f"nnx.shard_map{_TREE}",
            ),
        },
    ),
    "flax.nnx.transforms.general": Row("flaxgraph.transforms.general"),
    "flax.nnx.transforms.iteration": Row(
        "flaxgraph.transforms.iteration",
        {
            "AxisName": "collections.abc:Hashable",
            "Index": "builtins:int",
            "Leaves": "builtins:list",
            **_from(f"{_SURFACE}.transforms_records", "AxisFn Broadcasted"),
            **_from("flaxgraph.transforms.control", "fori_loop while_loop"),
            **_from("flaxgraph.transforms.lift_types", "StateAxes"),
            **_from("flaxgraph.transforms.metadata_hooks", "transform_metadata"),
            **_from("flaxgraph.transforms.scan", "Carry scan"),
            **_from("flaxgraph.transforms.vmap", "pmap vmap"),
            **_stand_ins(
                "class",
                VmapFn="nnx.vmap",
                PmapFn="nnx.pmap",
                ScanFn="nnx.scan",
                WhileLoopCondFn="nnx.while_loop",
                WhileLoopBodyFn="nnx.while_loop",
                ForiLoopBodyFn="nnx.fori_loop",
                SimpleVmapFn=f"nnx.vmap{_TREE}",
                SimplePmapFn=f"nnx.pmap{_TREE}",
                SimpleScanFn=f"nnx.scan{_TREE}",
                SimpleWhileLoopCondFn=f"nnx.while_loop{_TREE}",
                SimpleWhileLoopBodyFn=f"nnx.while_loop{_TREE}",
                SimpleForiLoopBodyFn=f"nnx.fori_loop{_TREE}",
            ),
        },
        doc="Flax NNX's ``transforms.iteration``: the mapping and looping transforms "
        "(``nnx.vmap``, ``nnx.scan``, ``nnx.StateAxes``…) at Flax's path.",
    ),
    "flax.nnx.transforms.transforms": Row(
        "flaxgraph.transforms.transforms",
        {
            "AxisName": "collections.abc:Hashable",
            "Index": "builtins:int",
            "Leaves": "builtins:list",
            **_from(f"{_SURFACE}.transforms_records", "LiftedModule ValueMetadata resolve_kwargs"),
            **_from("flaxgraph.transforms.checkify", "checkify"),
            **_from("flaxgraph.transforms.control", "cond eval_shape switch"),
            **_from("flaxgraph.transforms.make_jaxpr", "make_jaxpr"),
            **_stand_ins(
                "class",
                CheckifyFn="nnx.checkify",
                SimpleCheckifyFn=f"nnx.checkify{_TREE}",
                SimpleCondFn=f"nnx.cond{_TREE}",
                SimpleEvalShapeFn=f"nnx.eval_shape{_TREE}",
                SimpleMakeJaxprFn=f"nnx.make_jaxpr{_TREE}",
            ),
        },
        doc="Flax NNX's ``transforms.transforms``: the other transforms (``nnx.cond``, "
        "``nnx.checkify``…) at Flax's path, with ``resolve_kwargs`` and ``LiftedModule``.",
    ),
    "flax.nnx.traversals": Row("flaxgraph.traversals"),
    "flax.nnx.variablelib": Row(
        "flaxgraph.variablelib",
        {
            **_from(
                f"{_SURFACE}.variablelib_records",
                "AddAxisHook AxisIndex AxisName CreateValueHook GetValueHook HijaxVariableMeta "
                "Leaf PyTreeDef RemoveAxisHook SetValueHook VARIABLE_CONTEXT VariableContext "
                "VariableMeta",
            ),
            "is_array_ref": "flaxgraph.variablelib.refs:is_ref",
            "VariableState": "flaxgraph.variablelib.variable:Variable",  # Flax 0.12's old name
            **_stand_ins(
                "class",
                VariableQDD=_HIJAX,
                VariableEffect=_HIJAX,
                NewVariable=_HIJAX,
                SetVariable=_HIJAX,
                GetVariable=_HIJAX,
                AbstractVariable=_HIJAX,
            ),
            **_stand_ins("function", variable_effect=_HIJAX),
            **_stand_ins(
                "primitive", new_variable_p=_HIJAX, set_variable_p=_HIJAX, get_variable_p=_HIJAX
            ),
        },
    ),
    "flax.nnx.visualization": Row("flaxgraph.visualization"),
}
"""Every module of Flax NNX 0.12.8 (``flax.nnx.object`` and ``flax.nnx.wrappers`` too)."""
