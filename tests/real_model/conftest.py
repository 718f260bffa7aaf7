"""The real model server, once per test process; a test that needs it fails (never skips) when
it cannot start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.real_model.server import LlamaServer


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    try:
        server = LlamaServer().start()
    except RuntimeError as error:
        pytest.fail(str(error))
    yield server
    server.stop()


@pytest.fixture
def checked_server(llama_server: LlamaServer) -> Iterator[LlamaServer]:
    """The server, and after the test the check that it is still running (no request of the
    test crashed it)."""
    yield llama_server
    assert llama_server.alive(), llama_server.log.read_text(errors="replace")[-3000:]
