"""What names a measurement: when (UTC date and time), at which commit, on which machine.

:func:`run_info` extends :func:`specot.envinfo.environment_info` (library versions, CPU flags,
threads, load) with the date, the git commit of the repository the lab runs from (``None`` outside
a git checkout; ``commit_dirty`` when tracked files differ from it) and the CPU's model name, so a
result JSON says what it is without a name from whoever ran it. :func:`machine_label` is the short
form the reports print ("2-core Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, AMX").
"""

from __future__ import annotations

import datetime as _dt
import subprocess
from pathlib import Path
from typing import Any

from specot.envinfo import cpu_model, environment_info

__all__ = ["run_info", "git_commit", "cpu_model", "machine_label", "REPO_ROOT"]

#: The repository the lab is installed from (``pip install -e .``): ``src/specot_lab/bench`` → root.
REPO_ROOT = Path(__file__).resolve().parents[3]


def git_commit(root: Path = REPO_ROOT) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout at ``root``: the short hash of HEAD and whether tracked
    files differ from it; ``(None, None)`` when ``root`` is no checkout or git is missing."""
    if not (root / ".git").exists():
        return None, None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head or None, bool(status.strip())


def run_info() -> dict[str, Any]:
    """:func:`specot.envinfo.environment_info` plus ``date`` (UTC, ISO 8601, seconds), ``commit``,
    ``commit_dirty`` (:func:`git_commit`) and ``cpu_model`` (:func:`cpu_model`). Never raises."""
    commit, dirty = git_commit()
    return {**environment_info(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "commit_dirty": dirty, "cpu_model": cpu_model()}


def _short_model(model: str) -> str:
    """``Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz`` → ``Intel Xeon Platinum 8481C``."""
    model = model.replace("(R)", "").replace("(TM)", "").replace("(tm)", "").split(" @ ")[0]
    words = [w for w in model.split() if w not in ("CPU", "Processor")]
    return " ".join(words)


def machine_label(info: dict[str, Any], device: str = "cpu") -> str:
    """A short description of the machine in ``info`` (a :func:`run_info` record): the GPU's name when
    the target ran on one (``device``), else the core count, the CPU model and its matrix extension,
    e.g. ``2-core Intel Xeon Platinum 8481C with AMX``; ``info["machine_label"]`` when set."""
    if info.get("machine_label"):
        return str(info["machine_label"])
    if device != "cpu" and info.get("gpu"):
        return str(info["gpu"])
    flags = info.get("cpu_flags") or {}
    ext = "with AMX" if flags.get("amx_bf16") else "with AVX512-BF16" if flags.get("avx512_bf16") else \
        ", AVX2 only" if flags.get("avx2") else ""
    model = _short_model(info["cpu_model"]) if info.get("cpu_model") else "CPU"
    cores = info.get("cpu_count")
    return (f"{cores}-core {model}" if cores else model) + (f" {ext}" if ext.startswith("with") else ext)
