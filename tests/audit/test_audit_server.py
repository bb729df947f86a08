"""The black-box audit end to end: two real llama-cpp-python servers on 127.0.0.1 (the embedded
SmolLM2 GGUF), one speculative (prompt-lookup drafts), one plain; the audit compares their
samples through the OpenAI-compatible completions API."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specot.audit.adapters import ServerAdapter
from specot.audit.run import audit_greedy, audit_sampling
from specot.sampling import SamplingConfig

pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server] (pip install -e '.[dev]')")
PROMPT = "Repeat this list three times: apple, banana, cherry, apple, banana, cherry.\n"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(model: str, *extra: str):
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "512", "--verbose", "False", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=1).read()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the llama-cpp-python server did not start")
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the llama-cpp-python server did not answer")


@pytest.fixture(scope="module")
def servers():
    from specot.models.embedded import embedded_gguf

    model = str(Path(*embedded_gguf()))
    spec = _start(model, "--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "3")
    try:
        plain = _start(model)
    except Exception:
        spec[0].kill()
        raise
    yield spec[1], plain[1]
    for proc in (spec[0], plain[0]):
        proc.terminate()
        proc.wait(timeout=30)


class _Hotter(ServerAdapter):
    """A wrong reference: the same server sampled at a higher temperature than asked."""

    def _tokens(self, prompt, k, sampling, seed):
        return super()._tokens(prompt, k, SamplingConfig(sampling.temperature * 2.5), seed)


@pytest.mark.slow
def test_a_speculative_server_against_a_plain_one(servers):
    spec_url, plain_url = servers
    vocab: dict[str, int] = {}
    spec = ServerAdapter(spec_url, method="prompt-lookup", vocab=vocab)
    plain = ServerAdapter(plain_url, method="plain", vocab=vocab)
    s = SamplingConfig(1.0)
    row = audit_sampling(spec, s, PROMPT, k=3, samples=80, reference=plain, min_prefix=20)
    assert row.verdict.exact, row.verdict.min_adjusted_pvalue
    assert row.reference == "plain sample" and row.verdict.n_ref == 80
    json.dumps(row.to_dict())
    # the test has power against a visibly different law (80 samples gave p = 0.0025 on one llama.cpp build)
    wrong = audit_sampling(spec, s, PROMPT, k=3, samples=200, reference=_Hotter(plain_url, vocab=vocab),
                           min_prefix=20)
    assert not wrong.verdict.exact, wrong.verdict.min_adjusted_pvalue
    greedy = audit_greedy(spec, plain, [PROMPT], tokens=12)
    assert greedy.verdict.prompts == 1 and greedy.verdict.tokens == 12
