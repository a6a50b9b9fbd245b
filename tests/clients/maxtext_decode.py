"""MaxText's inference engine on the tiny model: prefill a prompt, then greedy decode steps.

Run inside MaxText's environment (``.venv-clients-maxtext``) by ``maxtext_trainer.py``, once as
``python maxtext_decode.py OUT CONFIG [key=value ...]`` (real Flax) and once as ``python -m
flaxgraph.run maxtext_decode.py OUT CONFIG [key=value ...]`` (``flax.nnx`` bound to flaxgraph).
``CONFIG`` and the overrides are MaxText's own (``maxtext.configs.pyconfig``); the program uses
MaxText's public serving engine, ``maxtext.inference.maxengine.maxengine.MaxEngine``, the engine
``maxtext.inference.decode`` drives, and follows the steps of that entry point:
``load_params`` (the NNX model built and initialised from ``init_weights_seed``), ``prefill`` of
a prompt, ``init_decode_state``, ``insert`` into slot 0 and ``generate`` once per further token,
with ``decode_sampling_strategy=greedy``.

Two differences from ``maxtext.inference.decode`` itself, both because this runs with
``DECOUPLE_GCLOUD=TRUE`` and without JetStream (the serving framework ``decode`` needs, not
published for this JAX): the prompt is token ids (``PROMPT``, all below the tiny vocabulary), not
text through a tokenizer; and MaxText's JetStream stand-in ``ResultTokens`` (a plain class in
``maxtext.common.gcloud_stub``) is registered as a JAX pytree, as JetStream's own ``ResultTokens``
dataclass is, so that the engine's jitted ``prefill`` and ``generate`` can return it.

Written to ``OUT`` (JSON): the prompt, the first token (from prefill) and the generated tokens,
and per position the logits the engine computed (prefill's and each generate step's, float32).
"""

from __future__ import annotations

import json
import sys

PROMPT = (5, 17, 42, 99, 3, 128, 77, 200, 11, 64, 250, 31)
DECODE_STEPS = 6  # generate calls after prefill's first token


def register_result_tokens(result_tokens: type) -> None:
    """Makes MaxText's stand-in ``ResultTokens`` a pytree: arrays as leaves, indices as static."""
    import jax

    def flatten(r: object) -> tuple[tuple[object, ...], tuple[object, ...]]:
        static = tuple(getattr(r, k) for k in ("tokens_idx", "valid_idx", "length_idx"))
        return (r.data, r.log_prob), (*static, r.samples_per_slot)  # type: ignore[attr-defined]

    def unflatten(aux: tuple[object, ...], children: tuple[object, ...]) -> object:
        tokens_idx, valid_idx, length_idx, samples = aux
        return result_tokens(
            data=children[0],
            log_prob=children[1],
            tokens_idx=tokens_idx,
            valid_idx=valid_idx,
            length_idx=length_idx,
            samples_per_slot=samples,
        )

    jax.tree_util.register_pytree_node(result_tokens, flatten, unflatten)


def main(argv: list[str]) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from maxtext.configs import pyconfig
    from maxtext.inference.maxengine import maxengine

    out, config_args = argv[1], argv[2:]
    if getattr(maxengine.engine_api, "_IS_STUB", False):
        register_result_tokens(maxengine.engine_api.ResultTokens)
    config = pyconfig.initialize([argv[0], *config_args])
    engine = maxengine.MaxEngine(config)
    params = engine.load_params(rng=jax.random.PRNGKey(0))
    length = config.max_prefill_predict_length
    padded = np.zeros((length,), dtype=np.int32)
    padded[: len(PROMPT)] = PROMPT
    prefix, _ = engine.prefill(
        params=params,
        padded_tokens=jnp.asarray(padded),
        true_length=len(PROMPT),
        rng=jax.random.PRNGKey(1),
        slot=0,
    )
    tokens = [int(np.asarray(prefix["tokens"]).reshape(-1)[0])]
    logits = [np.asarray(prefix["logits"], np.float32).reshape(-1).tolist()]
    state = engine.init_decode_state()
    state = engine.insert(prefix, state, slot=0)
    for step in range(DECODE_STEPS):
        state, _ = engine.generate(params, state, rng=jax.random.PRNGKey(2 + step))
        tokens.append(int(np.asarray(state["tokens"])[0, 0]))
        logits.append(np.asarray(state["logits"], np.float32)[0].reshape(-1).tolist())
    nnx = sys.modules.get("flax.nnx")
    record = {
        "flax.nnx": getattr(nnx, "__name__", None),
        "prompt": list(PROMPT),
        "tokens": tokens,
        "logits": logits,
    }
    with open(out, "w", encoding="utf-8") as sink:
        json.dump(record, sink)


if __name__ == "__main__":
    main(sys.argv)
