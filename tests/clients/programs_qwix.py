"""The qwix scenarios of the client contract: quantization and LoRA of small NNX Transformers.

Each scenario builds its model with fixed seeds from Flax NNX's public layers (``TinyTransformer``
below: an embedding, pre-norm blocks of ``nnx.MultiHeadAttention`` and an MLP, a vocabulary head)
and drives qwix's public API (``qwix.quantize_model``, ``qwix.apply_lora_to_model``, the providers
and rules, ``qwix.process_prequantized_params``, ``qwix.restore_quantization_rules``):

* ``ptq``: post-training quantization (int8 weights); the quantized model's logits and its
  quantized state; ``ptq_int8_activations`` the same with int8 activations too;
* ``qat``: quantized training (``QtProvider``, int8 weights), three steps of
  SGD through ``nnx.Optimizer``, ``nnx.jit``, ``nnx.value_and_grad``; losses and parameters;
* ``lora``: LoRA (rank 2) on the MLP and head layers, three Adam steps of only the ``nnx.LoRAParam``;
  losses, the LoRA parameters and the logits after training;
* ``scanned_ptq``: ``quantize_model`` on a stack of blocks made by ``nnx.vmap`` and run by
  ``nnx.scan``; logits and quantized state;
* ``orbax_round_trip``: the PTQ model's state saved with orbax's ``StandardCheckpointer``, restored
  into an abstract PTQ model (``nnx.eval_shape``) and merged; the restored tree and its logits;
* ``safetensors_round_trip``: the quantized weights written as ``qvalue``/``scale`` tensors to a
  safetensors file, read back, the rules recovered with ``restore_quantization_rules`` and loaded
  with ``process_prequantized_params`` into a fresh PTQ model; the loaded tree and its logits.

Run by ``programs.py --client qwix``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from scenario_kit import Registry, Values, arrays

SCENARIOS = Registry()
VOCAB, WIDTH, HEADS, LENGTH = 32, 16, 2, 8


def tiny_transformer(rngs: Any, layers: int = 2) -> Any:
    """A small decoder-only Transformer built from Flax NNX's public layers."""
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.norm1 = nnx.LayerNorm(WIDTH, rngs=rngs)
            self.attention = nnx.MultiHeadAttention(
                HEADS, WIDTH, qkv_features=WIDTH, decode=False, rngs=rngs
            )
            self.norm2 = nnx.LayerNorm(WIDTH, rngs=rngs)
            self.up = nnx.Linear(WIDTH, 2 * WIDTH, rngs=rngs)
            self.down = nnx.Linear(2 * WIDTH, WIDTH, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            mask = nnx.make_causal_mask(x[..., 0])
            x = x + self.attention(self.norm1(x), mask=mask)
            return x + self.down(nnx.gelu(self.up(self.norm2(x))))

    class TinyTransformer(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
            self.blocks = nnx.List([Block(rngs) for _ in range(layers)])
            self.head = nnx.Linear(WIDTH, VOCAB, rngs=rngs)

        def __call__(self, tokens: Any) -> Any:
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    TinyTransformer.Block = Block  # type: ignore[attr-defined]
    return TinyTransformer(rngs)


def _tokens(seed: int = 1) -> Any:
    import jax

    return jax.random.randint(jax.random.key(seed), (2, LENGTH), 0, VOCAB)


def _ptq_rules(act_qtype: str | None = None) -> list[Any]:
    import qwix

    return [qwix.QtRule(module_path=".*", weight_qtype="int8", act_qtype=act_qtype)]


def _ptq_model(act_qtype: str | None = None) -> Any:
    import qwix
    from flax import nnx

    model = tiny_transformer(nnx.Rngs(0))
    return qwix.quantize_model(model, qwix.PtqProvider(_ptq_rules(act_qtype)), _tokens())


def _pure_state(model: Any) -> Any:
    from flax import nnx

    return nnx.to_pure_dict(nnx.state(model))


@SCENARIOS.add(ci=True)
def ptq() -> Values:
    model = _ptq_model()
    return arrays(model(_tokens()), "logits") | arrays(_pure_state(model), "state/")


@SCENARIOS.add()
def ptq_int8_activations() -> Values:
    model = _ptq_model("int8")
    return arrays(model(_tokens()), "logits") | arrays(_pure_state(model), "state/")


def _train(model: Any, wrt: Any, transform: Any, steps: int = 3) -> list[float]:
    """``steps`` of next-token cross-entropy with ``transform`` on the ``wrt`` Variables; losses."""
    import optax
    from flax import nnx

    optimizer = nnx.Optimizer(model, transform, wrt=wrt)
    tokens = _tokens(2)

    @nnx.jit
    def step(model: Any, optimizer: Any, tokens: Any) -> Any:
        def loss_fn(model: Any) -> Any:
            logits = model(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, wrt))(model)
        optimizer.update(model, grads)
        return loss

    return [float(step(model, optimizer, tokens)) for _ in range(steps)]


@SCENARIOS.add()
def qat() -> Values:
    import optax
    import qwix
    from flax import nnx

    model = qwix.quantize_model(
        tiny_transformer(nnx.Rngs(0)), qwix.QtProvider(_ptq_rules()), _tokens()
    )
    # plain SGD: Adam's normalised step would turn the last-bit differences of two correct
    # float32 computations of a near-zero gradient into different int8 roundings of the weights
    losses = _train(model, nnx.Param, optax.sgd(0.05))
    return {"losses[float32]": losses} | arrays(nnx.to_pure_dict(nnx.state(model, nnx.Param)))


@SCENARIOS.add(ci=True)
def lora() -> Values:
    import optax
    import qwix
    from flax import nnx

    provider = qwix.LoraProvider(module_path=".*(up|down|head)", rank=2, alpha=4.0)
    model = qwix.apply_lora_to_model(
        tiny_transformer(nnx.Rngs(0)), provider, _tokens(), rngs=nnx.Rngs(3)
    )
    losses = _train(model, nnx.LoRAParam, optax.adam(1e-2))
    lora_state = nnx.to_pure_dict(nnx.state(model, nnx.LoRAParam))
    return {"losses[float32]": losses} | arrays(lora_state, "lora/") | arrays(model(_tokens()))


@SCENARIOS.add()
def scanned_ptq() -> Values:
    import jax
    import qwix
    from flax import nnx

    block_type = tiny_transformer(nnx.Rngs(0), layers=1).Block

    class Stack(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)

            @nnx.split_rngs(splits=3)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def blocks(rngs: nnx.Rngs) -> Any:
                return block_type(rngs)

            self.blocks = blocks(rngs)
            self.head = nnx.Linear(WIDTH, VOCAB, rngs=rngs)

        def __call__(self, tokens: jax.Array) -> jax.Array:
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            def through(x: jax.Array, block: Any) -> jax.Array:
                return block(x)

            return self.head(through(self.embed(tokens), self.blocks))

    model = qwix.quantize_model(Stack(nnx.Rngs(0)), qwix.PtqProvider(_ptq_rules()), _tokens())
    return arrays(model(_tokens()), "logits") | arrays(_pure_state(model), "state/")


@SCENARIOS.add()
def orbax_round_trip() -> Values:
    import orbax.checkpoint as ocp
    import qwix
    from flax import nnx

    model = _ptq_model()
    with tempfile.TemporaryDirectory() as folder:
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(Path(folder) / "ptq", nnx.state(model))
        checkpointer.wait_until_finished()
        abstract = nnx.eval_shape(
            lambda: qwix.quantize_model(
                tiny_transformer(nnx.Rngs(5)), qwix.PtqProvider(_ptq_rules()), _tokens()
            )
        )
        graphdef, target = nnx.split(abstract)
        restored = checkpointer.restore(Path(folder) / "ptq", target)
    again = nnx.merge(graphdef, restored)
    return arrays(again(_tokens()), "logits") | arrays(nnx.to_pure_dict(restored), "restored/")


def _quantized_tensors(model: Any) -> dict[str, Any]:
    """The model's state as flat numpy tensors named by their paths (``a.kernel.array.qvalue``)."""
    import jax
    import numpy as np

    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(_pure_state(model)):
        key = jax.tree_util.keystr(path, simple=True, separator=".")
        out[key] = np.asarray(leaf)
    return out


def _nest(flat: dict[str, Any]) -> dict[Any, Any]:
    import jax.numpy as jnp

    tree: dict[Any, Any] = {}
    for key, value in flat.items():
        parts = [int(p) if p.isdigit() else p for p in key.split(".")]
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = jnp.asarray(value)
    return tree


@SCENARIOS.add()
def safetensors_round_trip() -> Values:
    import qwix
    import safetensors.numpy
    from flax import nnx

    model = _ptq_model()
    tensors = {k: v for k, v in _quantized_tensors(model).items() if "kernel" in k}
    with tempfile.TemporaryDirectory() as folder:
        safetensors.numpy.save_file(tensors, str(Path(folder) / "ptq.safetensors"))
        loaded = _nest(safetensors.numpy.load_file(str(Path(folder) / "ptq.safetensors")))
    rules = qwix.restore_quantization_rules(loaded, qwix.QtRule, tile_size=None, act_qtype=None)
    fresh = qwix.quantize_model(tiny_transformer(nnx.Rngs(0)), qwix.PtqProvider(rules), _tokens())
    nnx.update(fresh, qwix.process_prequantized_params(loaded, fresh, allow_extra_params=False))
    return (
        arrays(fresh(_tokens()), "logits")
        | arrays(_pure_state(fresh), "loaded/")
        | {"rules[int64]": [len(rules)]}
    )
