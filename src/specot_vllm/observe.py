"""What the plugin reports: its log lines (through vLLM's logger), the verifier label of a
deployment (a log line and the Prometheus gauge ``specot_verifier_info``), and the optional trace
file the engine tests read (``SPECOT_VLLM_TRACE``).

This module imports nothing else of the plugin: every other module may use it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import Any

__all__ = ["log", "trace", "announce_verifier"]


def _logger() -> logging.Logger:
    """vLLM's logger (its handlers print in every vLLM process), or a plain one without vLLM."""
    try:
        from vllm.logger import init_logger

        return init_logger("vllm.specot")  # under vLLM's namespace: its handlers print it
    except ImportError:  # pragma: no cover
        return logging.getLogger("specot_vllm")


log = _logger()


class _TraceFile:
    """The ``SPECOT_VLLM_TRACE`` file of this process: each distinct line written once (the file is
    per process by nature: every vLLM process appends its own lines)."""

    def __init__(self) -> None:
        self.written: set[str] = set()

    def write(self, event: str, **fields: Any) -> None:
        path = os.environ.get("SPECOT_VLLM_TRACE")
        line = json.dumps({"event": event, "pid": os.getpid(), **fields})
        if not path or line in self.written:
            return
        self.written.add(line)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


_TRACE = _TraceFile()


def trace(event: str, **fields: Any) -> None:
    """Append ``{"event", "pid", **fields}`` as one JSON line to the file named by the environment
    variable ``SPECOT_VLLM_TRACE`` (each distinct line once per process; nothing when it is unset):
    how tests see, from outside vLLM's engine processes, that the plugin's code ran there."""
    _TRACE.write(event, **fields)


@functools.cache
def _gauge() -> Any:
    """The ``specot_verifier_info`` gauge, registered once in Prometheus's process-wide registry."""
    from prometheus_client import Gauge

    return Gauge("specot_verifier_info", "specot verifier of this deployment (1 = active)",
                 ["verifier", "params", "lossless"])


def announce_verifier(cfg: Any) -> None:
    """Log the deployment's verifier (a lossy one as a WARNING naming its parameter's value) and
    set the gauge ``specot_verifier_info{verifier, params, lossless} = 1``.

    Args:
        cfg: a :class:`specot_vllm.config.SpecotVllmConfig`.
    """
    lossless = cfg.lossless
    if lossless:
        log.info("specot verifier: %s", cfg.label())
    else:
        log.warning("specot verifier: %s — outputs do NOT follow the target model's distribution", cfg.label())
    try:
        params = ",".join(f"{k}={v}" for k, v in sorted(cfg.verifier_params.items()))
        _gauge().labels(cfg.verifier, params, str(lossless).lower()).set(1)
    except Exception:  # pragma: no cover - metrics are optional
        pass
