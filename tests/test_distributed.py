"""Multi-process training (guides/distributed_train.py), run for real on this machine.

* 2 processes x 2 CPU devices, joined by ``jax.distributed`` on 127.0.0.1 through
  the script's launcher mode, give the same losses (rtol 1e-5) as 1 process x 4
  devices on the same ('data', 'model') = (2, 2) mesh; the first kernel is sharded
  over all 4 devices (each process holds 2 of its 4 blocks), the optimizer state
  follows it, and the orbax checkpoint written by both processes restores onto the
  mesh equal to the trained state.
* The launcher runs with bogus proxy variables in its environment (the workers must
  not see them) and picks its port itself; the test kills the launcher's whole
  process group if it outlives its hard timeout.
* A worker that cannot reach its coordinator exits non-zero with a message within
  its (short) timeout.

Both runs start at once, so the file takes about as long as one run (~20 s on 2
busy cores).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "guides" / "distributed_train.py"
HARD_TIMEOUT = 60.0  # s, per run; the process group is killed after it

pytest.importorskip("orbax.checkpoint")
pytest.importorskip("optax")


def load_script_module() -> Any:
    spec = importlib.util.spec_from_file_location("distributed_train", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    # A new session: the process and every worker it starts form one process group.
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"killed after {timeout} s:\n{out[-3000:]}\n{err[-3000:]}")
    return proc.returncode, out, err


def results(out: str) -> list[dict[str, Any]]:
    found = [
        json.loads(line[len("RESULT=") :])
        for line in out.splitlines()
        if line.startswith("RESULT=")
    ]
    return sorted(found, key=lambda r: r["process"])


def test_two_processes_match_one_process_with_four_devices(tmp_path: Path) -> None:
    proxies = {
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "ALL_PROXY": "socks5://127.0.0.1:9",
        "grpc_proxy": "http://127.0.0.1:9",
    }
    common = ["--json", "--steps", "4", "--timeout", "20"]
    multi = start(
        ["--launch", "2", "--devices-per-process", "2", "--hard-timeout", str(HARD_TIMEOUT - 5),
         "--checkpoint-dir", str(tmp_path / "multi"), *common],
        base_env(**proxies),
    )  # fmt: skip
    single = start(
        ["--num-processes", "1", "--devices-per-process", "4",
         "--checkpoint-dir", str(tmp_path / "single"), *common],
        base_env(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu"),
    )  # fmt: skip
    code_m, out_m, err_m = finish(multi, HARD_TIMEOUT)
    code_s, out_s, err_s = finish(single, HARD_TIMEOUT)
    assert code_m == 0, out_m[-3000:] + err_m[-3000:]
    assert code_s == 0, out_s[-3000:] + err_s[-3000:]
    two, one = results(out_m), results(out_s)
    assert [r["process"] for r in two] == [0, 1] and [r["processes"] for r in two] == [2, 2]
    assert len(one) == 1 and one[0]["processes"] == 1
    for r in [*two, *one]:
        assert r["devices"] == 4 and r["mesh"] == {"data": 2, "model": 2}
        assert r["kernel_devices"] == 4 and r["kernel_spec"] == "P('data', 'model')"
        assert r["adam_mu_spec"] == "P('data', 'model')"
        assert r["restored_equal"] is True
        np.testing.assert_allclose(r["losses"], one[0]["losses"], rtol=1e-5)
        np.testing.assert_allclose(r["final_loss"], one[0]["final_loss"], rtol=1e-5)
    # the kernel (8, 16) is split in 2 x 2 blocks of (4, 8): 2 per process, 4 in one
    assert [r["kernel_local_shards"] for r in two] == [[[4, 8]] * 2] * 2
    assert one[0]["kernel_local_shards"] == [[4, 8]] * 4
    losses = one[0]["losses"]
    assert losses[-1] < losses[0]  # it trains
    assert (tmp_path / "multi" / "state" / "_CHECKPOINT_METADATA").is_file()


def test_a_worker_that_cannot_reach_the_coordinator_fails_within_its_timeout() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    began = time.monotonic()
    proc = start(
        ["--num-processes", "2", "--process-id", "1", "--coordinator", f"127.0.0.1:{port}",
         "--timeout", "2"],
        base_env(),
    )  # fmt: skip
    code, _out, err = finish(proc, 30)
    elapsed = time.monotonic() - began
    assert code != 0
    assert f"cannot reach the coordinator at 127.0.0.1:{port} within 2 s" in err
    assert elapsed < 25, elapsed


def test_worker_env_removes_proxies_and_sets_the_devices() -> None:
    module = load_script_module()
    env = module.worker_env(
        3, {"HTTPS_PROXY": "x", "no_proxy": "y", "All_Proxy": "z", "PATH": "/bin", "HOME": "/h"}
    )
    assert env == {
        "PATH": "/bin",
        "HOME": "/h",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=3",
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",
    }
    port = module.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # it is free
    assert module.without_launch(["--launch", "2", "--json", "--launch=3", "--steps", "1"]) == [
        "--json",
        "--steps",
        "1",
    ]
