"""A Tunix LoRA fine-tuning step, written for Flax NNX (``from flax import nnx``), unmodified.

Run it on real Flax with ``python guides/tunix_lora_step.py`` and on flaxgraph with
``python -m flaxgraph.run guides/tunix_lora_step.py``. It builds Tunix's toy transformer, puts
qwix LoRA adapters (rank 4) on its MLPs, makes Tunix's ``PeftTrainer`` and runs the trainer's
compiled train step (the one ``PeftTrainer.train`` calls) on a fixed batch. It prints one JSON
line: which module ``flax.nnx`` is, the loss of each step, the LoRA parameters after the steps
and the median seconds per step after compilation. Needs ``pip install 'flaxgraph[clients]'``.
"""

import json
import statistics
import sys
import time
import warnings

warnings.simplefilter("ignore")  # qwix warns that the toy model passes no rngs to LoRA

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tunix.sft import peft_trainer
from tunix.tests import test_common as tc

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20

model = tc.get_lora_model(tc.ToyTransformer(config=tc.ModelConfig(), rngs=nnx.Rngs(0)))
config = peft_trainer.TrainingConfig(eval_every_n_steps=10**9)
trainer = peft_trainer.PeftTrainer(model, optax.sgd(1e-2), config)
trainer = trainer.with_gen_model_input_fn(
    lambda x: {
        "input_tokens": x.input_tokens,
        "input_mask": x.input_mask,
        "positions": jnp.arange(x.input_tokens.shape[1]),
        "attention_mask": jnp.ones_like(x.input_tokens),
    }
)
train_step, _ = trainer.jit_train_and_eval_step(cache_nnx_graph=True)

tokens = np.arange(32).reshape(2, 16)
batch = peft_trainer.TrainingInput(input_tokens=tokens, input_mask=np.ones_like(tokens))
losses, seconds = [], []
for _ in range(steps):
    start = time.perf_counter()
    loss = jax.block_until_ready(train_step(batch)[0])
    seconds.append(time.perf_counter() - start)
    losses.append(float(loss))

lora = nnx.state(model, nnx.LoRAParam)
print(
    json.dumps(
        {
            "flax.nnx": nnx.__name__,
            "losses": losses,
            "lora": {
                jax.tree_util.keystr(path): np.asarray(leaf).tolist()
                for path, leaf in jax.tree_util.tree_leaves_with_path(lora)
            },
            "seconds_per_step": statistics.median(seconds[2:]),
        }
    )
)
