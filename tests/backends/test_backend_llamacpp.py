"""The `openai` backend against a real llama.cpp server (optional extra `llamacpp`) serving the embedded SmolLM2 GGUF:
greedy answers with token log-probs, reproducible; K samples although the server ignores `n` (the backend falls back
to seeded separate requests); P(True) from the returned top alternatives. Skipped when llama-cpp-python[server] is
not installed. The server is started exactly as docs/backends.md tells users to start it."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

pytest.importorskip("llama_cpp.server")

from haldet.backends.openai_backend import OpenAIBackend
from haldet.config import EndpointConfig


@pytest.fixture(scope="module")
def llama_url() -> Iterator[str]:
    from haldet.util.assets import MODEL_ALIASES

    gguf = MODEL_ALIASES["smollm2-135m"]()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                             "--port", str(port), "--n_threads", "1", "--n_ctx", "1024", "--model_alias", "smollm2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as resp:
                    json.load(resp)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail("the llama.cpp server did not start")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_llamacpp_server_greedy_samples_and_p_true(llama_url: str) -> None:
    be = OpenAIBackend("openai:smollm2", EndpointConfig(base_url=llama_url, concurrency=1, timeout=120))
    prompt = be.render_chat([{"role": "user", "content": "What is the capital of France? One word."}])
    first = be.generate([prompt], max_new_tokens=6, batch_size=1)[0]
    again = be.generate([prompt], max_new_tokens=6, batch_size=1)[0]
    assert not first.error and first.text and first.text == again.text  # greedy: reproducible
    assert 0 < len(first.token_logprobs) <= 6 and len(first.extra["tokens"]) == len(first.token_logprobs)
    assert all(lp <= 0 for lp in first.token_logprobs) and "".join(first.extra["tokens"]) == first.text
    samples = be.sample([prompt], k=2, temperature=1.0, top_p=0.9, seeds=[7], max_new_tokens=4, batch_size=2)[0]
    assert len(samples) == 2 and all(not s.error and s.token_logprobs for s in samples)
    assert be.n_supported is False  # llama.cpp returns one choice whatever `n` says
    question = be.render_chat([{"role": "user", "content": "Is Paris the capital of France? Reply True or False."}])
    out, true_lps, false_lps = be.self_eval_logprobs([question], ["True", " True"], ["False", " False"],
                                                     max_new_tokens=2, batch_size=1)[0]
    assert not out.error and any(math.isfinite(x) for x in true_lps + false_lps)
    assert be.usage_report()["calls"] == 2 + 2 + 1 and be.usage_report()["completion_tokens"] > 0
