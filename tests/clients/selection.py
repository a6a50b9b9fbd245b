"""Which Tunix and qwix test files ``make clients`` runs, which it leaves out and why.

Tunix (google/tunix) and qwix (google/qwix) are libraries written against Flax NNX
(``from flax import nnx``); their own test suites, run with ``flax.nnx`` bound to flaxgraph,
are the second contract next to Flax's own ``tests/nnx``. The selection is every test file of
theirs that uses ``flax.nnx`` and runs on CPU without the network; ``EXCLUDED`` lists the rest
with the reason. ``CI`` is the bounded subset ``.ci/run`` runs (one file per area: PEFT/LoRA
training, DPO, GRPO, sampling, qwix LoRA and PTQ).
"""

from __future__ import annotations

from typing import NamedTuple


class TestFile(NamedTuple):
    """One selected test file of a client."""

    client: str  # "tunix" or "qwix"
    path: str  # relative to the client's source tree
    min_python: tuple[int, int] = (3, 11)  # the file's syntax needs at least this interpreter

    @property
    def name(self) -> str:
        """``client/path``, the prefix of its tests' ids in the expectations file."""
        return f"{self.client}/{self.path}"


class Exclusion(NamedTuple):
    """Test files of a client that are not run, and why."""

    client: str
    files: str
    reason: str


TUNIX = [
    TestFile("tunix", "tests/sft/peft_trainer_test.py"),
    TestFile("tunix", "tests/sft/dpo/dpo_trainer_test.py"),
    TestFile("tunix", "tests/sft/dpo/orpo_trainer_test.py"),
    TestFile("tunix", "tests/sft/checkpoint_manager_test.py", min_python=(3, 12)),
    TestFile("tunix", "tests/sft/system_metrics_calculator_test.py"),
    TestFile("tunix", "tests/rl/grpo/grpo_learner_test.py"),
    TestFile("tunix", "tests/rl/grpo/dapo_learner_test.py"),
    TestFile("tunix", "tests/rl/grpo/drgrpo_learner_test.py"),
    TestFile("tunix", "tests/rl/ppo/ppo_learner_test.py"),
    TestFile("tunix", "tests/rl/rl_cluster_test.py"),
    TestFile("tunix", "tests/rl/rl_learner_test.py"),
    TestFile("tunix", "tests/rl/rl_utils_test.py"),
    TestFile("tunix", "tests/rl/common_test.py"),
    TestFile("tunix", "tests/rl/algo_core_test.py"),
    TestFile("tunix", "tests/rl/agentic/agentic_grpo_learner_test.py"),
    TestFile("tunix", "tests/generate/sampler_test.py"),
    TestFile("tunix", "tests/generate/beam_search_test.py"),
    TestFile("tunix", "tests/generate/utils_test.py"),
    TestFile("tunix", "tests/generate/mappings_config_test.py"),
    TestFile("tunix", "tests/distillation/distillation_trainer_test.py"),
    TestFile("tunix", "tests/distillation/feature_extraction/projection_test.py"),
    TestFile("tunix", "tests/distillation/feature_extraction/sowed_module_test.py"),
    TestFile("tunix", "tests/distillation/strategies/attention_test.py"),
    TestFile("tunix", "tests/distillation/strategies/feature_pooling_test.py"),
    TestFile("tunix", "tests/distillation/strategies/feature_projection_test.py"),
    TestFile("tunix", "tests/distillation/strategies/logit_test.py"),
    TestFile("tunix", "tests/models/dummy_model_creator_test.py"),
    TestFile("tunix", "tests/models/automodel_test.py"),
    TestFile("tunix", "tests/models/flash_attention_cache_test.py"),
    TestFile("tunix", "tests/models/gemma4/model_test.py"),
    TestFile("tunix", "tests/models/gemma4/gemma4_params_test.py"),
    TestFile("tunix", "tests/models/gemma_all/gemma_params_test.py"),
    TestFile("tunix", "tests/models/qwen3/qwen_params_test.py"),
    TestFile("tunix", "tests/models/llama3/params_test.py"),
    TestFile("tunix", "tests/models/safetensors_loader_test.py"),
    TestFile("tunix", "tests/diffusion/types_test.py"),
    TestFile("tunix", "tests/cli/config_test.py"),
    TestFile("tunix", "tests/cli/utils/model_test.py"),
    TestFile("tunix", "tests/experimental/train/peft_trainer_v2_test.py"),
]

QWIX = [
    TestFile("qwix", "tests/_src/providers/lora_test.py"),
    TestFile("qwix", "tests/_src/providers/ptq_test.py"),
    TestFile("qwix", "tests/_src/providers/qt_test.py"),
    TestFile("qwix", "tests/_src/providers/odml_test.py"),
    TestFile("qwix", "tests/_src/qconfig_test.py"),
    TestFile("qwix", "tests/_src/utils/checkpoint_util_test.py"),
    TestFile("qwix", "tests/_src/utils/flax_util_test.py"),
    TestFile("qwix", "tests/contrib/calibration_test.py"),
    TestFile("qwix", "tests/contrib/gptq_test.py"),
    TestFile("qwix", "tests/contrib/smooth_quant_test.py"),
    TestFile("qwix", "integration_tests/orbax_safetensors_test.py"),
]

ALL = [*TUNIX, *QWIX]

# The bounded subset for CI (.ci/run): one file per area, chosen for coverage per second.
# GRPO is covered through DAPO, its variant on the same learner, and sampling by the
# differential tests of `make test`: grpo_learner_test.py and sampler_test.py alone run for
# 20 to 30 minutes each on 2 busy cores.
CI = [
    "tunix/tests/sft/dpo/dpo_trainer_test.py",
    "tunix/tests/rl/grpo/dapo_learner_test.py",
    "tunix/tests/distillation/strategies/feature_projection_test.py",
    "qwix/tests/_src/providers/lora_test.py",
    "qwix/tests/_src/providers/ptq_test.py",
    "qwix/tests/_src/utils/flax_util_test.py",
]

SUBSETS = {"all": [f.name for f in ALL], "ci": CI}

EXCLUDED = [
    Exclusion(
        "tunix",
        "tests/generate/vllm_*.py, tests/generate/sglang_jax_*.py, "
        "tests/experimental/rollout/*vllm*",
        "need the vllm / sgl_jax inference engines (GPU/TPU builds)",
    ),
    Exclusion(
        "tunix",
        "tests/sft/metrics_logger_test.py, tests/sft/otel_wandb_test.py",
        "no flax.nnx use; need opentelemetry / wandb",
    ),
    Exclusion(
        "tunix",
        "tests/cli/base_rl_pipeline_test.py, tests/cli/grpo_main_test.py, "
        "tests/cli/ppo_main_test.py",
        "no flax.nnx use in the test; need `datasets` / tensorflow_datasets and hub downloads",
    ),
    Exclusion(
        "tunix",
        "tests/generate/tokenizer_adapter_test.py, tests/models/naming_test.py, "
        "tests/smoke_tests/model_creation_test.py, tests/model_alignment/qwen_align_test.py",
        "download tokenizers / checkpoints from the Hugging Face or Kaggle hubs (network)",
    ),
    Exclusion(
        "tunix",
        "tests/models/gemma3/*, tests/models/registry_test.py, "
        "tests/models/gemma4/params_safetensors_test.py, tests/rl/ppo/ppo_helpers_test.py, "
        "tests/rl/reward_manager_test.py, tests/rl/algorithm_config_test.py, "
        "tests/rl/function_registry_test.py, tests/rl/rollout/*, tests/rl/agentic/* (but "
        "agentic_grpo_learner_test.py), tests/distillation/feature_extraction/pooling_test.py, "
        "tests/sft/{checkpoint_options,profiler,progress_bar,sft_utils,sharding_utils}_test.py, "
        "tests/perf/*, tests/processors/*, tests/utils/*, tests/common/*, tests/examples/*",
        "plain JAX / Python: these files do not use flax.nnx",
    ),
    Exclusion(
        "tunix",
        "tests/experimental/** (but train/peft_trainer_v2_test.py)",
        "distributed runtime and orchestration (grpc, k8s); no or incidental flax.nnx use",
    ),
    Exclusion(
        "qwix",
        "tests/_src/core/*, tests/_src/averaging_test.py, tests/_src/interception_test.py, "
        "tests/contrib/{awq_core,gptq_core,qep_core,hadamard_rot}_test.py, "
        "tests/contrib/hijax/*, tests/contrib/sparsity/*",
        "plain JAX numerics, no flax.nnx",
    ),
    Exclusion(
        "qwix",
        "tests/_src/model_test.py, tests/contrib/{awq,qep,padded_ptq}_test.py, "
        "integration_tests/coverage_test.py",
        "Linen only (flax.linen stays the real Flax)",
    ),
    Exclusion("qwix", "tests/contrib/kernels/*", "Pallas TPU kernels"),
    Exclusion(
        "qwix",
        "integration_tests/cnn_test.py, integration_tests/vae_qat_test.py",
        "need tensorflow_datasets and a data set download (network)",
    ),
    Exclusion("qwix", "integration_tests/odml_*_test.py", "need ai_edge_jax (LiteRT converter)"),
]
