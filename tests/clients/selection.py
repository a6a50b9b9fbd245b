"""Which Tunix, qwix and MaxText test files ``own_tests.py`` runs from a checkout, and why not others.

Tunix (google/tunix), qwix (google/qwix) and MaxText (AI-Hypercomputer/maxtext) are written
against Flax NNX (``from flax import nnx``); their own test suites, run from a checkout the user
names with ``flax.nnx`` bound to flaxgraph, are an opt-in witness next to the client contract.
The selection is every test file of theirs that uses ``flax.nnx`` (for MaxText, whose default
model path is pure NNX, also every ``tests/unit`` file that builds and runs a model) and runs on
CPU without the network; ``EXCLUDED`` lists the rest with the reason. ``QUICK`` is a short subset
(one file per area: PEFT/LoRA training, DPO, GRPO, qwix LoRA and PTQ; MaxText's NNX wrappers,
scan, sharding, train state and gradient accumulation), ``--subset quick``. The paths are those
of the client commits ``flax_baseline.txt`` was recorded on; a file another checkout lacks is
reported and not run.
"""

from __future__ import annotations

from typing import NamedTuple


class TestFile(NamedTuple):
    """One selected test file of a client."""

    client: str  # "tunix", "qwix" or "maxtext" (a key of environments.CLIENTS)
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

MAXTEXT_NNX = [
    "nnx_decoders_test.py",
    "nnx_scan_test.py",
    "nnx_wrappers_test.py",
    "nnx_quant_guard_test.py",
    "sharding_nnx_test.py",
    "train_nnx_test.py",
    "train_state_nnx_test.py",
    "train_state_nnx_checkpoint_test.py",
    "train_utils_nnx_test.py",
    "setup_initial_state_nnx_test.py",
    "gradient_accumulation_nnx_test.py",
    "checkpointing_nnx_roundtrip_test.py",
    "checkpointing_nnx_missing_param_test.py",
    "standalone_checkpointer_nnx_test.py",
    "maxtext_utils_nnx_test.py",
    "multi_token_prediction_test.py",
    "linears_test.py",
    "embeddings_test.py",
    "state_dtypes_test.py",
]

# The other tests/unit files that import flax.nnx, or that build and run a model under MaxText's
# defaults (pure NNX), and run on CPU offline (their TPU/GPU-only tests skip themselves).
MAXTEXT_MORE = [
    "aqt_serve_roundtrip_nnx_test.py",
    "attention_compressed_test.py",
    "attention_test.py",
    "checkpointing_emergency_nnx_test.py",
    "checkpointing_nnx_load_test.py",
    "correctness_tests_nnx_dispatch_test.py",
    "decoder_layer_model_mode_test.py",
    "gemma4_small_test.py",
    "generate_param_only_checkpoint_nnx_test.py",
    "grpo_nnx_test.py",
    "layerwise_quantization_nnx_test.py",
    "llama_test.py",
    "lora_utils_nnx_test.py",
    "max_utils_test.py",
    "maxtext_utils_test.py",
    "mhc_test.py",
    "model_creation_utils_test.py",
    "model_test.py",
    "moe_test.py",
    "muon_utils_test.py",
    "nnx_decoder_test.py",
    "optimizers_test.py",
    "partial_rotary_embedding_test.py",
    "pre_train_loss_mask_test.py",
    "qk_clip_test.py",
    "quantizations_test.py",
    "qwen35_partial_mrope_test.py",
    "tiling_test.py",
    "train_utils_test.py",
]

MAXTEXT = [
    TestFile("maxtext", f"tests/unit/{name}", min_python=(3, 12))
    for name in [*MAXTEXT_NNX, *MAXTEXT_MORE]
]

ALL = [*TUNIX, *QWIX, *MAXTEXT]

# A short subset (--subset quick): one file per area, chosen for coverage per second.
# GRPO is covered through DAPO, its variant on the same learner, and sampling by the
# differential tests of `make test`: grpo_learner_test.py and sampler_test.py alone run for
# 20 to 30 minutes each on 2 busy cores.
QUICK = [
    "tunix/tests/sft/dpo/dpo_trainer_test.py",
    "tunix/tests/rl/grpo/dapo_learner_test.py",
    "tunix/tests/distillation/strategies/feature_projection_test.py",
    "qwix/tests/_src/providers/lora_test.py",
    "qwix/tests/_src/providers/ptq_test.py",
    "qwix/tests/_src/utils/flax_util_test.py",
    # MaxText: its Linen<->NNX wrappers, the scanned layer stack, logical sharding, the NNX train
    # state and gradient accumulation (about 40-60 s each at load 12)
    "maxtext/tests/unit/nnx_wrappers_test.py",
    "maxtext/tests/unit/nnx_scan_test.py",
    "maxtext/tests/unit/sharding_nnx_test.py",
    "maxtext/tests/unit/train_state_nnx_test.py",
    "maxtext/tests/unit/gradient_accumulation_nnx_test.py",
]

SUBSETS = {"all": [f.name for f in ALL], "quick": QUICK}

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
    Exclusion(
        "maxtext",
        "tests/unit/{deepseek32,deepseek_v4,engram,qwen3_next}_vs_reference_test.py, "
        "tests/unit/{gemma4_small,qwen3_5,qwen3_omni,qwen3_vl}_layers_test.py",
        "import flax.nnx but MaxText's own pytest.ini ignores them (--ignore): PyTorch reference "
        "implementations / Hugging Face model code not in its decoupled environment",
    ),
    Exclusion(
        "maxtext",
        "tests/unit/{block_diffusion,checkpoint_context,checkpointing,compile_cache,configs,"
        "configs_value,context_parallelism,data_loader,elastic_utils,envy,estimator,"
        "flop_calculation,gcloud_stub,gcs_utils,goodput_utils,grain_*,hf_data_processing,"
        "hlo_test_utils,input_pipeline_utils,instruction_data_processing,kernels,"
        "managed_mldiagnostics,marker_propagation,metric_logger_abort,multihost_dataloading,"
        "multimodal_utils,newly_added_detection,param_mapping,pyconfig*,sharding_desc,"
        "synthetic_data,tfds_data_processing,tokamax_*,tokenizer*,ulysses_*,usp_*}_test.py, "
        "tests/unit/eval/*, tests/unit/input_pipeline/*",
        "no flax.nnx and no model built: configuration, data pipelines, tokenizers, kernels, "
        "cloud stubs, plain JAX collectives",
    ),
    Exclusion(
        "maxtext",
        "tests/unit/{sharding_compare,train_compile}_test.py, "
        "tests/unit/{pallas_mosaic_tpu_v2_kernel,dequantize_*,gemma3_layers,llama4_layers,"
        "gpt_vs_reference,yarn_vs_reference,moba_vs_reference,hf_checkpoint_conversion,"
        "offline_engine,profiler}_test.py",
        "ahead-of-time compilation for TPU topologies, Pallas TPU kernels, or ignored by "
        "MaxText's pytest.ini (PyTorch references, checkpoint conversion, serving engine)",
    ),
    Exclusion(
        "maxtext",
        "tests/unit/gemma4_layers_test.py",
        "imports flax.nnx, but each of its 7 tests compares with the Hugging Face PyTorch Gemma 4 "
        "and skips itself without torch/transformers, which the decoupled environment leaves out: "
        "all 7 skip on real Flax and on flaxgraph (measured 2026-11-28, 40 s each)",
    ),
    Exclusion(
        "maxtext",
        "tests/unit/gpt3_test.py",
        "builds a GPT-3 model, but both its tests are marked tpu_only (one also skipped for "
        "numerical differences on jax>0.5.0): both skip on real Flax and on flaxgraph "
        "(measured 2026-11-28, 45-70 s each)",
    ),
    Exclusion(
        "maxtext",
        "tests/unit/deepseek_decode_consistency_test.py, tests/unit/maxengine_nnx_test.py",
        "needs JetStream (MaxText's serving engine), which the decoupled environment leaves out: "
        "each file skips itself (pytest.importorskip) on real Flax and on flaxgraph",
    ),
    Exclusion(
        "maxtext",
        "tests/integration/*, tests/end_to_end/*, tests/post_training/*, tests/inference/*",
        "multi-host / accelerator / network runs (GCS buckets, Hugging Face checkpoints); the "
        "trainer and the inference engine end to end are the contract's MaxText scenarios "
        "(tests/clients/maxtext_trainer.py)",
    ),
]
