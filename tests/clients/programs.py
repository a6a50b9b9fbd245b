"""Small programs that drive the released Tunix and qwix, run once on real Flax and once on flaxgraph.

``python tests/clients/programs.py --flax-nnx flaxgraph OUT.json`` binds ``flax.nnx`` to
flaxgraph with the drop-in (``flaxgraph.install_as_flax_nnx``) before anything imports Flax,
runs every scenario below and writes, per scenario, its numeric results (a flat
``{name: nested list}``) or the error it raised. ``--flax-nnx flax`` runs the same program on
real Flax. ``tests/test_clients_differential.py`` compares the two files. Each scenario uses
Tunix's own toy transformer (``tunix.tests.test_common``, shipped in the wheel) and fixed seeds,
so both runs compute the same numbers:

* ``peft_lora``: LoRA (qwix's ``LoraProvider``) on the toy transformer, two steps of Tunix's
  ``PeftTrainer``; the LoRA parameters after training;
* ``dpo``: two steps of Tunix's ``DPOTrainer`` with a reference model; the parameters;
* ``grpo``: Tunix's ``GRPOLearner`` on an ``RLCluster`` whose rollout is the vanilla sampler
  with Tunix's mock vocabulary (no tokenizer download), two steps, a fixed reward; parameters;
* ``sampling``: Tunix's ``Sampler``, greedy, on two prompts; the generated tokens and logits;
* ``qwix_ptq``: qwix post-training quantization (int8 weights) of a small NNX MLP; the
  quantized model's output and its quantized weights.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {}


def scenario(fn: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    SCENARIOS[fn.__name__] = fn
    return fn


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{path: nested list}`` for every array leaf of ``tree`` (a State, dict or array)."""
    import jax
    import numpy as np

    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        value = getattr(leaf, "value", leaf)
        if hasattr(value, "shape"):
            array = np.asarray(value)
            if array.dtype.kind in "fiub" or str(array.dtype) == "bfloat16":
                key = prefix + jax.tree_util.keystr(path, simple=True, separator="/")
                out[key] = array.astype(np.float64).tolist()
    return out


def _toy(vocab_size: int = 256, seed: int = 0) -> Any:
    from flax import nnx
    from tunix.tests import test_common as tc

    return tc.ToyTransformer(config=tc.ModelConfig(vocab_size=vocab_size), rngs=nnx.Rngs(seed))


@scenario
def peft_lora() -> dict[str, Any]:
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx
    from tunix.sft import peft_trainer
    from tunix.tests import test_common as tc

    model = tc.get_lora_model(_toy())
    config = peft_trainer.TrainingConfig(eval_every_n_steps=100, max_steps=2)
    trainer = peft_trainer.PeftTrainer(model, optax.sgd(1e-2), config)
    trainer = trainer.with_gen_model_input_fn(
        lambda x: {
            "input_tokens": x.input_tokens,
            "input_mask": x.input_mask,
            "positions": jnp.arange(x.input_tokens.shape[1]),
            "attention_mask": jnp.ones_like(x.input_tokens),
        }
    )
    tokens = np.arange(64).reshape((2, 2, 16)) % 256
    data = [
        peft_trainer.TrainingInput(input_tokens=x, input_mask=np.ones(x.shape, np.int32))
        for x in tokens
    ]
    trainer.train(data)
    return _flat(nnx.state(model, nnx.LoRAParam))


@scenario
def dpo() -> dict[str, Any]:
    import numpy as np
    import optax
    from flax import nnx
    from tunix.sft.dpo import dpo_trainer

    model, ref_model = _toy(), _toy()
    trainer = dpo_trainer.DPOTrainer(
        model=model,
        ref_model=ref_model,
        optimizer=optax.sgd(1e-2),
        training_config=dpo_trainer.DPOTrainingConfig(eval_every_n_steps=100, max_steps=2),
    )
    item = dpo_trainer.TrainingInput(
        prompt_ids=np.array([[0, 0, 3, 4], [5, 6, 7, 8]]),
        prompt_mask=np.array([[0, 0, 1, 1], [1, 1, 1, 1]]),
        chosen_ids=np.array([[9, 10, 11, 0], [12, 13, 0, 0]]),
        chosen_mask=np.array([[1, 1, 1, 0], [1, 1, 0, 0]]),
        rejected_ids=np.array([[14, 15, 0, 0], [16, 17, 18, 19]]),
        rejected_mask=np.array([[1, 1, 0, 0], [1, 1, 1, 1]]),
    )
    trainer.train([item, item])
    return _flat(nnx.state(model, nnx.Param))


@scenario
def grpo() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx
    from grain import python as grain
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout
    from tunix.tests import test_common as tc

    vocab = tc.MockVocab()
    model = _toy(vocab.GetPieceSize())
    reference = _toy(vocab.GetPieceSize())
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    cluster = rl_cluster_lib.RLCluster(
        actor=model,
        reference=reference,
        tokenizer=vocab,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={
                rl_cluster_lib.Role.ACTOR: mesh,
                rl_cluster_lib.Role.REFERENCE: mesh,
                rl_cluster_lib.Role.ROLLOUT: mesh,
            },
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.sgd(1e-2), eval_every_n_steps=100, max_steps=2
            ),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=6,
                max_prompt_length=8,
                kv_cache_size=32,
                temperature=1e-6,
            ),
        ),
    )
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster,
        reward_fns=lambda prompts, completions, **_: jnp.arange(len(completions), dtype=float),
        algo_config=grpo_learner.GRPOConfig(num_generations=2, num_iterations=1),
    )
    prompts = ["input string", "hello world", "My name", "hello there"]
    data = grain.MapDataset.source(prompts).batch(2).map(lambda x: {"prompts": x, "answer": x})
    learner.train(data)
    return _flat(nnx.state(model, nnx.Param))


@scenario
def sampling() -> dict[str, Any]:
    import numpy as np
    from tunix.generate import sampler as sampler_lib
    from tunix.tests import test_common as tc

    vocab = tc.MockVocab()
    model = _toy(vocab.GetPieceSize())
    sampler = sampler_lib.Sampler(
        transformer=model,
        tokenizer=vocab,
        cache_config=sampler_lib.CacheConfig(
            cache_size=64, num_layers=4, num_kv_heads=4, head_dim=16
        ),
    )
    out = sampler(
        ["input string", "hello world"], max_generation_steps=6, return_logits=True, echo=False
    )
    tokens = [np.asarray(t).astype(np.float64).tolist() for t in out.tokens]
    logits = [np.asarray(t).astype(np.float64).tolist() for t in out.logits]
    return {f"tokens/{i}": t for i, t in enumerate(tokens)} | {
        f"logits/{i}": t for i, t in enumerate(logits)
    }


@scenario
def qwix_ptq() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import qwix
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.up = nnx.Linear(16, 32, rngs=rngs)
            self.down = nnx.Linear(32, 8, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.down(nnx.relu(self.up(x)))

    x = jax.random.normal(jax.random.key(1), (4, 16))
    rules = [qwix.QtRule(module_path=".*", weight_qtype="int8", act_qtype="int8")]
    model = qwix.quantize_model(MLP(nnx.Rngs(0)), qwix.PtqProvider(rules), x)
    out = model(x)
    return {"output": jnp.asarray(out, jnp.float32).tolist()} | _flat(nnx.state(model), "state/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flax-nnx", choices=("flax", "flaxgraph"), required=True)
    parser.add_argument("--only", nargs="+", choices=sorted(SCENARIOS))
    parser.add_argument("out")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if args.flax_nnx == "flaxgraph":
        import flaxgraph

        flaxgraph.install_as_flax_nnx()
    results = {}
    for name in args.only or SCENARIOS:
        try:
            results[name] = {"values": SCENARIOS[name]()}
        except Exception as error:  # recorded for the comparison, which reports it
            last = traceback.extract_tb(error.__traceback__)[-1]
            results[name] = {
                "error": f"{type(error).__name__}: {error}"[:2000],
                "where": f"{last.filename}:{last.lineno}",
            }
    import flax.nnx

    results["_binding"] = {"flax.nnx": flax.nnx.__name__}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
