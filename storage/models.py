"""The records the store keeps: pinned blocks and conversation history entries."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Level(StrEnum):
    """Where a block goes: the system prompt (strong) or beside the user message (context)."""

    STRONG = "strong"
    CONTEXT = "context"


class State(StrEnum):
    """Lifecycle state: active and pinned blocks are injected, idle ones are not."""

    ACTIVE = "active"
    IDLE = "idle"
    PINNED = "pinned"


class Block(BaseModel):
    """One stored block of one scope, with its revision for optimistic concurrency."""

    model_config = ConfigDict(frozen=True)

    id: int
    scope: str
    label: str
    content: str
    level: Level
    state: State
    priority: int = 0
    created_at: datetime
    updated_at: datetime
    idle_since: datetime | None = None
    idle_calls: int | None = None
    rev: int = 0


class NewBlock(BaseModel):
    """A block about to be inserted; the store assigns its id."""

    model_config = ConfigDict(frozen=True)

    scope: str
    label: str
    content: str
    level: Level
    state: State = State.ACTIVE
    priority: int = 0


class HistoryEntry(BaseModel):
    """One message of a conversation's history, as the model saw it (without injected blocks)."""

    model_config = ConfigDict(frozen=True)

    id: int
    role: str
    content: str
