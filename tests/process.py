"""Running the real `pinbot` command as a user would, for the tests that judge it from outside."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

PINBOT = str(Path(sys.executable).parent / "pinbot")
PROCESS_TIMEOUT_S = 60  # a safety net for a hung process, not a pause


async def run_pinbot(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """Run `pinbot ARGS` with stdin, the environment plus env, in folder cwd (default: this
    one); returns (exit status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        PINBOT,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), PROCESS_TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
