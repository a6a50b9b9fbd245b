"""Shared timing utilities for the benchmarks.

The contenders of one comparison are timed in the same process and interleaved:
every round times each contender once (one *sample* = ``number`` back-to-back
calls), the order rotating from round to round, so drift in machine load, CPU
frequency or caches hits all contenders alike. The reported figure is the median
over rounds of the per-call time; the interquartile range tells how stable it was.
Ratios between contenders are best taken per round (``paired_ratio``).
As in ``timeit``, the garbage collector is off while a sample runs (and a full
collection runs between rounds).

Typical use::

  timings = measure({"a": f, "b": g}, settings=FULL)
  print(timings["a"].median / timings["b"].median)
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"


@dataclasses.dataclass(frozen=True)
class Settings:
    """How long to time each contender.

    Attributes:
      repeat: number of interleaved rounds (samples per contender).
      min_time: a sample lasts at least this many seconds (``number`` is calibrated
        to reach it).
      warmup: untimed calls of each contender before calibration.
    """

    repeat: int
    min_time: float
    warmup: int = 3


FULL = Settings(repeat=31, min_time=0.02, warmup=5)
QUICK = Settings(repeat=3, min_time=0.0005, warmup=1)


@dataclasses.dataclass(frozen=True)
class Timing:
    """The samples of one contender, in seconds per call.

    Attributes:
      name: the contender's name.
      samples: one per-call time per round.
      number: calls per sample.
    """

    name: str
    samples: tuple[float, ...]
    number: int

    @property
    def median(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.samples)

    @property
    def iqr(self) -> float:
        """Interquartile range of the per-call times, in seconds (0 for < 2 samples)."""
        if len(self.samples) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q3 - q1

    @property
    def relative_iqr(self) -> float:
        """``iqr / median``: the spread as a fraction of the median."""
        return self.iqr / self.median if self.median else 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable summary (times in microseconds)."""
        return {
            "median_us": self.median * 1e6,
            "iqr_us": self.iqr * 1e6,
            "min_us": min(self.samples) * 1e6,
            "rounds": len(self.samples),
            "calls_per_sample": self.number,
        }


def _run(
    fn: Callable[[], object], number: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Seconds taken by ``number`` calls of ``fn`` (by ``clock``), garbage collector off."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        for _ in itertools.repeat(None, number):
            fn()
        return clock() - start
    finally:
        if gc_was_enabled:
            gc.enable()


def calibrate(
    fn: Callable[[], object], min_time: float, clock: Callable[[], float] = time.perf_counter
) -> int:
    """Returns a call count (1, 2, 5, 10, 20, 50, …) whose sample lasts >= ``min_time``."""
    for exponent in itertools.count():
        for mantissa in (1, 2, 5):
            number = mantissa * 10**exponent
            if _run(fn, number, clock) >= min_time:
                return number
    raise AssertionError("unreachable")


def measure(
    contenders: Mapping[str, Callable[[], object]],
    settings: Settings,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Timing]:
    """Times every contender, interleaved, and returns a ``Timing`` per name.

    Args:
      contenders: name -> zero-argument callable; each call is one operation.
      settings: rounds, sample length and warm-up.
      clock: the clock (``time.process_time`` counts the CPU time of this process
        only, all its threads: steadier than wall time on a machine other processes
        keep busy).

    Returns:
      name -> ``Timing`` (in the order of ``contenders``).
    """
    names = list(contenders)
    for name in names:
        for _ in range(settings.warmup):
            contenders[name]()
    numbers = {name: calibrate(contenders[name], settings.min_time, clock) for name in names}
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(settings.repeat):
        shift = round_index % len(names)
        order = names[shift:] + names[:shift]
        if round_index % 2:
            order.reverse()
        gc.collect()
        for name in order:
            samples[name].append(_run(contenders[name], numbers[name], clock) / numbers[name])
    return {name: Timing(name, tuple(samples[name]), numbers[name]) for name in names}


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of ``numerator``'s sample / ``denominator``'s sample.

    Both samples of a round were taken moments apart, so load that drifts between
    rounds cancels out: this ratio is steadier than the ratio of the medians when
    the machine is busy.
    """
    return statistics.median(
        a / b for a, b in zip(numerator.samples, denominator.samples, strict=True)
    )


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or ``None`` if either is missing or zero."""
    if not numerator or not denominator:
        return None
    return numerator / denominator


def format_number(x: float | None, digits: int = 2) -> str:
    """Formats a number for a table cell (``-`` for ``None``)."""
    return "-" if x is None else f"{x:.{digits}f}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Returns a plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def optional_import(name: str, *, required: bool) -> ModuleType | None:
    """Imports a comparator module.

    Returns:
      The module, or ``None`` if it is not installed and not ``required``.

    Raises:
      SystemExit: it is not installed and ``required`` (the message says how to
        install the ``bench`` extra).
    """
    try:
        return importlib.import_module(name)
    except ImportError as error:
        if required:
            raise SystemExit(
                f"The comparator {name!r} is not installed ({error}).\n"
                'Fix: pip install -e ".[bench]", or pass --quick to skip missing comparators.'
            ) from None
        return None


def _version(name: str) -> str | None:
    module = sys.modules.get(name)
    return getattr(module, "__version__", None) if module is not None else None


def environment() -> dict[str, Any]:
    """Describes the machine and library versions, for the JSON output."""
    import jax

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "flaxgraph": _version("flaxgraph"),
        "flax": _version("flax"),
        "equinox": _version("equinox"),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average_1m": load_average(),
    }


def load_average() -> float | None:
    """The 1-minute load average (``None`` where the OS does not report it)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_warning() -> str | None:
    """A warning if other processes keep the CPUs busy (load average above half the
    CPU count), which inflates absolute times; paired ratios suffer less."""
    load, cpus = load_average(), os.cpu_count() or 1
    if load is None or load <= cpus / 2:
        return None
    return (
        f"warning: the machine is busy (load average {load:.1f} on {cpus} CPUs): absolute "
        "times are inflated and noisy; the paired ratios are more trustworthy."
    )


def print_load(start: float | None, end: float | None, warning: str | None) -> None:
    """Prints the load average at the start and end of a run, and the busy-machine warning
    (``warning``, given at the start, or ``busy_warning()`` now) if there is one."""
    print(
        f"\nload average (1 min): {format_number(start, 1)} at start, {format_number(end, 1)} at end"
    )
    warning = warning or busy_warning()
    if warning:
        print(warning)


def run_json_child(module: str, args: Sequence[str], what: str, timeout: float) -> dict[str, Any]:
    """Runs ``python -m module *args`` from the repository root in a fresh process (hard
    ``timeout`` in seconds) and returns the JSON object on the last line it prints.

    Raises ``SystemExit`` naming ``what`` ran, with the process's output, if it fails.
    """
    command = [sys.executable, "-m", module, *args]
    proc = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"the {what} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def write_json(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> Path:
    """Writes ``payload`` as indented JSON, creating parent directories; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    return path


def base_parser(description: str, default_json: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark shares.

    ``--quick`` (tiny repetition counts, missing comparators skipped), ``--json PATH``
    (default ``benchmarks/results/<default_json>``, or ``<stem>_quick.json`` with
    ``--quick``), ``--repeat`` and ``--min-time`` (override the settings).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a few seconds: tiny repetition counts, small models, missing comparators skipped",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help=f"where to write the results (default: benchmarks/results/{default_json})",
    )
    parser.add_argument("--repeat", type=int, default=None, help="interleaved rounds")
    parser.add_argument("--min-time", type=float, default=None, help="minimum seconds per sample")
    parser.set_defaults(default_json=default_json)
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The ``Settings`` chosen by ``--quick``, ``--repeat`` and ``--min-time``."""
    settings = QUICK if args.quick else FULL
    if args.repeat is not None:
        settings = dataclasses.replace(settings, repeat=args.repeat)
    if args.min_time is not None:
        settings = dataclasses.replace(settings, min_time=args.min_time)
    return settings


def json_path_from_args(args: argparse.Namespace) -> Path:
    """The JSON output path chosen by ``--json`` (or the default for the mode)."""
    if args.json is not None:
        return Path(args.json)
    name = Path(args.default_json)
    if args.quick:
        name = name.with_name(f"{name.stem}_quick{name.suffix}")
    return RESULTS_DIR / name


def profile_calls(
    fn: Callable[[], object], calls: int, *, top: int = 25, sort: str = "tottime", warmup: int = 3
) -> str:
    """cProfile of ``calls`` calls of ``fn`` (after ``warmup`` untimed ones): a header
    with the profiled µs per call, then the ``top`` lines of the stats sorted by
    ``sort`` (``tottime``, ``cumulative``…)."""
    import cProfile
    import io
    import pstats

    for _ in range(warmup):
        fn()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(sort).print_stats(top)
    total = stats.total_tt  # type: ignore[attr-defined]
    body = out.getvalue()
    start = body.find("   ncalls")
    head = f"total {total / calls * 1e6:.0f} µs per call (profiler overhead included)"
    return head + "\n" + (body[start:] if start >= 0 else body)
