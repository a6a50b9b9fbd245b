"""The main job (``make demo``) runs end to end on a small configuration.

The full demo trains 8 members for 40 epochs; here 2 small members train for 2
epochs, which still exercises every step (vmap over __init__ with split_rngs,
scan over blocks, jit + value_and_grad + Optimizer, metrics, the plot, the
checkpoint round trip) and must beat chance by far.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs_and_learns(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "guides" / "digits_ensemble.py"),
            "--epochs",
            "2",
            "--members",
            "2",
            "--blocks",
            "1",
            "--width",
            "32",
            "--out",
            str(tmp_path),
            "--min-accuracy",
            "0.6",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ensemble: test accuracy" in result.stdout
    assert "reloaded model gives identical predictions: True" in result.stdout
    assert (tmp_path / "training_curve.png").stat().st_size > 0
    assert (tmp_path / "ensemble_checkpoint" / "_CHECKPOINT_METADATA").is_file()
