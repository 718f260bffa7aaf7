"""The agent tools: pin_set, pin_get and pin_delete over the speaker's personal scope, with the
same limits and permissions as /pin."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.core.conversation import Conversation
from bot.core.pins import PinService
from bot.llm.base import Tool
from storage.models import Level

_SCOPE_NOTE = "Works only on the current speaker's personal blocks, never on shared group blocks."

TOOL_SPECS: list[Tool] = [
    {
        "type": "function",
        "function": {
            "name": "pin_set",
            "description": "Create or update a pinned block that is sent with every later request. "
            + _SCOPE_NOTE
            + " Pinned blocks cannot be changed.",
            "parameters": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "description": "short name, no spaces"},
                    "content": {"type": "string"},
                    "level": {
                        "type": "string",
                        "enum": ["strong", "context"],
                        "description": "strong: a continuing rule; context: reference material",
                    },
                    "pinned": {"type": "boolean", "description": "keep until the user removes it"},
                    "priority": {"type": "integer", "description": "higher comes first; default 0"},
                },
                "required": ["label", "content"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "pin_get",
            "description": "Read one pinned block by label, or list them all without a label. "
            + _SCOPE_NOTE,
            "parameters": {
                "type": "object",
                "properties": {"label": {"type": "string"}},
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "pin_delete",
            "description": "Delete a pinned block by label. Pinned blocks cannot be deleted. "
            + _SCOPE_NOTE,
            "parameters": {
                "type": "object",
                "properties": {"label": {"type": "string"}},
                "required": ["label"],
                "additionalProperties": False,
            },
        },
    },
]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SetArgs(_Args):
    """Arguments of pin_set."""

    label: str
    content: str
    level: Literal["strong", "context"] | None = None
    pinned: bool = False
    priority: int | None = None


class GetArgs(_Args):
    """Arguments of pin_get."""

    label: str | None = None


class DeleteArgs(_Args):
    """Arguments of pin_delete."""

    label: str


SHARED_REFUSAL = (
    "Refused: the tools work only on the speaker's personal blocks; shared group "
    "blocks are managed by the group's shared admins with /pin shared."
)


class PinTools:
    """Runs one tool call for the speaker of a conversation and returns the tool result text."""

    def __init__(self, pins: PinService) -> None:
        self._pins = pins

    async def call(self, conversation: Conversation, name: str, arguments: str) -> str:
        """The result of the call, or the reason it was refused; never raises on bad input."""
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return "Refused: the arguments are not valid JSON."
        if not isinstance(raw, dict):
            return "Refused: the arguments must be a JSON object."
        if raw.pop("scope", "personal") != "personal":
            return SHARED_REFUSAL
        try:
            return await self._dispatch(conversation, name, raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors()
            )
            return f"Refused: invalid arguments for {name}: {problems}"

    async def _dispatch(self, conversation: Conversation, name: str, raw: dict[str, Any]) -> str:
        if name == "pin_set":
            args = SetArgs.model_validate(raw)
            return await self._pins.agent_set(
                conversation,
                args.label,
                args.content,
                level=Level(args.level) if args.level else None,
                pinned=args.pinned,
                priority=args.priority,
            )
        if name == "pin_get":
            label = GetArgs.model_validate(raw).label
            result = await self._pins.agent_get(conversation, label)
            if isinstance(result, str):
                return result
            return json.dumps(
                [
                    {
                        "label": b.label,
                        "content": b.content,
                        "level": b.level.value,
                        "state": b.state.value,
                        "priority": b.priority,
                    }
                    for b in result
                ],
                ensure_ascii=False,
            )
        if name == "pin_delete":
            return await self._pins.agent_delete(conversation, DeleteArgs.model_validate(raw).label)
        return f"Refused: there is no tool named '{name}'."
