"""The Tunix scenarios of the client contract: its trainers, RL learners, sampler and checkpoints.

Every scenario builds its models with fixed seeds from Tunix's public model classes (a tiny
``tunix.models.llama3`` configuration, ``tiny_llama``: 2 layers, width 32, vocabulary 32) and a
small character tokenizer of ours (``CharTokenizer``, the methods Tunix's ``TokenizerAdapter``
asks for), and drives Tunix's public entry points:

* ``peft_lora``: qwix LoRA (``qwix.LoraProvider``, rank 4) on the model, two steps of Tunix's
  ``PeftTrainer``; the LoRA parameters after training;
* ``dpo`` and ``orpo``: two steps of ``DPOTrainer`` (``algorithm`` "dpo" with a reference model,
  "orpo" without); the parameters;
* ``grpo``: ``GRPOLearner`` on an ``RLCluster`` (vanilla rollout, greedy), two steps with a fixed
  reward function; the actor's parameters;
* ``ppo``: ``PPOLearner`` with a critic (the tiny model with a one-output head), one step; the
  actor's and the critic's parameters;
* ``sampling``: ``Sampler`` greedy on two prompts (tokens and logits), and with ``beam_size=2``;
* ``distillation``: ``DistillationTrainer`` with the ``LogitStrategy`` (a wider teacher), two
  steps; the student's parameters;
* ``checkpoint``: ``tunix.sft.checkpoint_manager.CheckpointManager`` saves a trained model and its
  optimizer, restores them into a fresh model and optimizer; the restored state and the saved
  checkpoint's tree as orbax reads it back.

Run by ``programs.py --client tunix``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from scenario_kit import Registry, Values, arrays

SCENARIOS = Registry()
PROMPTS = ["abc d", "hello", "my name", "hi there"]


class CharTokenizer:
    """Characters ``a``-``z`` and space as token ids 3..29; 0 pads, 1 begins, 2 ends."""

    ALPHABET = "abcdefghijklmnopqrstuvwxyz "

    def encode(self, text: str, **_: Any) -> list[int]:
        return [self.ALPHABET.index(c) + 3 for c in text.lower() if c in self.ALPHABET]

    def decode(self, ids: Any, **_: Any) -> str:
        return "".join(self.ALPHABET[i - 3] for i in ids if 3 <= int(i) < 3 + len(self.ALPHABET))

    def bos_id(self) -> int:
        return 1

    def eos_id(self) -> int:
        return 2

    def pad_id(self) -> int:
        return 0


def tiny_llama(seed: int = 0, width: int = 32, layers: int = 2) -> Any:
    """A tiny ``tunix.models.llama3.model.Llama3`` (vocabulary 32)."""
    from flax import nnx
    from tunix.models.llama3 import model as llama3

    config = llama3.ModelConfig(
        num_layers=layers,
        vocab_size=32,
        embed_dim=width,
        hidden_dim=2 * width,
        num_heads=4,
        head_dim=width // 4,
        num_kv_heads=2,
        rope_theta=10_000,
        norm_eps=1e-6,
    )
    return llama3.Llama3(config, rngs=nnx.Rngs(seed))


def _model_inputs(x: Any) -> dict[str, Any]:
    """Tunix's PEFT inputs -> the model's arguments (causal mask, positions from the mask)."""
    from tunix.sft import utils

    return {
        "input_tokens": x.input_tokens,
        "input_mask": x.input_mask,
        "positions": utils.build_positions_from_mask(x.input_mask),
        "attention_mask": utils.make_causal_attn_mask(x.input_mask),
    }


def _token_batches(steps: int = 2) -> list[Any]:
    import numpy as np
    from tunix.sft import peft_trainer

    tokens = (np.arange(steps * 2 * 12).reshape((steps, 2, 12)) * 7) % 29 + 3
    return [
        peft_trainer.TrainingInput(input_tokens=x, input_mask=np.ones(x.shape, np.int32))
        for x in tokens
    ]


@SCENARIOS.add(ci=True)
def peft_lora() -> Values:
    import optax
    import qwix
    from flax import nnx
    from tunix.sft import peft_trainer

    base = tiny_llama()
    provider = qwix.LoraProvider(
        module_path=".*(q_proj|kv_proj|gate_proj|up_proj)", rank=4, alpha=2.0
    )
    model = qwix.apply_lora_to_model(base, provider, **base.get_model_input(), rngs=nnx.Rngs(1))
    config = peft_trainer.TrainingConfig(eval_every_n_steps=100, max_steps=2)
    trainer = peft_trainer.PeftTrainer(model, optax.adam(1e-2), config)
    trainer.with_gen_model_input_fn(_model_inputs).train(_token_batches())
    return arrays(nnx.to_pure_dict(nnx.state(model, nnx.LoRAParam)), "lora/")


def _preference_data() -> list[Any]:
    import numpy as np
    from tunix.sft.dpo import dpo_trainer

    item = dpo_trainer.TrainingInput(
        prompt_ids=np.array([[0, 0, 3, 4], [5, 6, 7, 8]]),
        prompt_mask=np.array([[0, 0, 1, 1], [1, 1, 1, 1]]),
        chosen_ids=np.array([[9, 10, 11, 0], [12, 13, 0, 0]]),
        chosen_mask=np.array([[1, 1, 1, 0], [1, 1, 0, 0]]),
        rejected_ids=np.array([[14, 15, 0, 0], [16, 17, 18, 19]]),
        rejected_mask=np.array([[1, 1, 0, 0], [1, 1, 1, 1]]),
    )
    return [item, item]


def _preference(algorithm: str) -> Values:
    import optax
    from flax import nnx
    from tunix.sft.dpo import dpo_trainer

    model = tiny_llama()
    trainer = dpo_trainer.DPOTrainer(
        model=model,
        ref_model=tiny_llama() if algorithm == "dpo" else None,
        optimizer=optax.adam(1e-2),
        training_config=dpo_trainer.DPOTrainingConfig(
            algorithm=algorithm, eval_every_n_steps=100, max_steps=2
        ),
    )
    trainer.train(_preference_data())
    return arrays(nnx.to_pure_dict(nnx.state(model, nnx.Param)))


@SCENARIOS.add(ci=True)
def dpo() -> Values:
    return _preference("dpo")


@SCENARIOS.add()
def orpo() -> Values:
    return _preference("orpo")


def _cluster(actor: Any, **models: Any) -> Any:
    import jax
    import numpy as np
    import optax
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.rollout import base_rollout

    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    roles = [rl_cluster_lib.Role.ACTOR, rl_cluster_lib.Role.REFERENCE, rl_cluster_lib.Role.ROLLOUT]
    if "critic" in models:
        roles.append(rl_cluster_lib.Role.CRITIC)
    return rl_cluster_lib.RLCluster(
        actor=actor,
        tokenizer=CharTokenizer(),
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={role: mesh for role in roles},
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.sgd(1e-2),
                critic_optimizer=optax.sgd(1e-2) if "critic" in models else None,
                eval_every_n_steps=100,
                max_steps=2,
            ),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=6, max_prompt_length=8, kv_cache_size=32, temperature=1e-6
            ),
        ),
        **models,
    )


def _reward(prompts: Any, completions: Any, **_: Any) -> Any:
    """A fixed reward: the number of vowels in each completion."""
    return [float(sum(c in "aeiou" for c in completion)) for completion in completions]


def _prompts(batch: int = 2) -> Any:
    from grain import python as grain

    return grain.MapDataset.source(PROMPTS).batch(batch).map(lambda x: {"prompts": x, "answer": x})


@SCENARIOS.add(ci=True)
def grpo() -> Values:
    from flax import nnx
    from tunix.rl.grpo import grpo_learner

    actor = tiny_llama()
    cluster = _cluster(actor, reference=tiny_llama())
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster,
        reward_fns=_reward,
        algo_config=grpo_learner.GRPOConfig(num_generations=2, num_iterations=1),
    )
    learner.train(_prompts())
    return arrays(nnx.to_pure_dict(nnx.state(actor, nnx.Param)))


@SCENARIOS.add()
def ppo() -> Values:
    from flax import nnx
    from tunix.models.llama3 import model as llama3
    from tunix.rl.ppo import ppo_learner

    class Critic(nnx.Module):
        """The tiny model with a one-output head: a value per token."""

        def __init__(self) -> None:
            self.backbone = tiny_llama(seed=2)
            self.backbone.lm_head = llama3.Einsum(
                einsum_str="BTD,DV->BTV", shape=(32, 1), rngs=nnx.Rngs(3), sharding=(None, None)
            )

        def __call__(
            self,
            tokens: Any,
            positions: Any,
            cache: Any,
            attention_mask: Any,
            segment_ids: Any = None,
        ) -> Any:
            del segment_ids  # Tunix passes them with the attention mask, which already holds them
            return self.backbone(tokens, positions, cache, attention_mask)

    actor, critic = tiny_llama(), Critic()
    cluster = _cluster(actor, reference=tiny_llama(), critic=critic)
    learner = ppo_learner.PPOLearner(
        rl_cluster=cluster, ppo_config=ppo_learner.PPOConfig(num_iterations=1), reward_fns=_reward
    )
    learner.train(_prompts())
    return arrays(nnx.to_pure_dict(nnx.state(actor, nnx.Param)), "actor/") | arrays(
        nnx.to_pure_dict(nnx.state(critic, nnx.Param)), "critic/"
    )


@SCENARIOS.add(ci=True)
def sampling() -> Values:
    import numpy as np
    from tunix.generate import sampler as sampler_lib

    model = tiny_llama()
    config = sampler_lib.CacheConfig(cache_size=32, num_layers=2, num_kv_heads=2, head_dim=8)
    sampler = sampler_lib.Sampler(transformer=model, tokenizer=CharTokenizer(), cache_config=config)
    greedy = sampler(PROMPTS[:2], max_generation_steps=6, return_logits=True, echo=False)
    beams = sampler(PROMPTS[:2], max_generation_steps=6, beam_size=2, echo=False)
    out: Values = {}
    for name, result in (("greedy", greedy), ("beam", beams)):
        for i, tokens in enumerate(result.tokens):
            out[f"{name}/tokens/{i}[int]"] = np.asarray(tokens).astype(np.float64).tolist()
    for i, logits in enumerate(greedy.logits):
        out[f"greedy/logits/{i}[float32]"] = np.asarray(logits).astype(np.float64).tolist()
    return out


@SCENARIOS.add()
def distillation() -> Values:
    import optax
    from flax import nnx
    from tunix.distillation import distillation_trainer
    from tunix.distillation.strategies import logit

    def forward(
        model: Any, input_tokens: Any, positions: Any, attention_mask: Any, **_: Any
    ) -> Any:
        return model(input_tokens, positions, None, attention_mask)[0]

    def labels(input_tokens: Any, **_: Any) -> Any:
        import jax

        return jax.nn.one_hot(input_tokens, 32)

    student, teacher = tiny_llama(), tiny_llama(seed=4, width=48)
    trainer = distillation_trainer.DistillationTrainer(
        student_model=student,
        teacher_model=teacher,
        strategy=logit.LogitStrategy(forward, forward, labels, temperature=2.0, alpha=0.5),
        optimizer=optax.adam(1e-2),
        training_config=distillation_trainer.TrainingConfig(eval_every_n_steps=100, max_steps=2),
    )
    trainer.with_gen_model_input_fn(_model_inputs).train(_token_batches())
    return arrays(nnx.to_pure_dict(nnx.state(student, nnx.Param)))


@SCENARIOS.add(ci=True)
def checkpoint() -> Values:
    import optax
    import orbax.checkpoint as ocp
    from flax import nnx
    from tunix.sft import checkpoint_manager, peft_trainer

    model = tiny_llama()
    config = peft_trainer.TrainingConfig(eval_every_n_steps=100, max_steps=2)
    trainer = peft_trainer.PeftTrainer(model, optax.adam(1e-2), config)
    trainer.with_gen_model_input_fn(_model_inputs).train(_token_batches())
    with tempfile.TemporaryDirectory() as folder:
        saver = checkpoint_manager.CheckpointManager(folder)
        saver.save(2, model, trainer.optimizer, force=True)
        saver.close()
        fresh = tiny_llama(seed=9)
        optimizer = nnx.Optimizer(fresh, optax.adam(1e-2), wrt=nnx.Param)
        restorer = checkpoint_manager.CheckpointManager(folder)
        step, _ = restorer.maybe_restore(fresh, optimizer)
        restorer.close()
        on_disk = ocp.PyTreeCheckpointer().restore(Path(folder) / "2" / "model_params")
    return (
        {"step[int]": [step]}
        | arrays(nnx.to_pure_dict(nnx.state(fresh)), "restored/")
        | arrays(nnx.to_pure_dict(nnx.state(optimizer, nnx.optimizer.OptState)), "opt/")
        | arrays(on_disk, "disk/")
    )
