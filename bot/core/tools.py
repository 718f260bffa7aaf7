"""The agent tools: pin_set, pin_get and pin_delete over the speaker's personal scope, with the
same limits and permissions as /pin."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.core.blocks import BlockOps, Done, Outcome, Refused, Target, find_block
from bot.core.context import MessageContext
from bot.llm.base import Tool
from storage.models import Channel, Level, State

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


SHARED_REFUSAL = Refused(
    "The tools work only on the speaker's personal blocks; shared group blocks are managed by "
    "the group's shared admins with /pin shared."
)
NEXT_TURN = " It applies from the next turn."


def tool_message(outcome: Outcome) -> str:
    """The text a tool result carries back to the model."""
    return outcome.message if isinstance(outcome, Done) else f"Refused: {outcome.reason}"


class PinTools:
    """Runs one tool call for the speaker of a message, over the same operations as /pin."""

    def __init__(self, ops: BlockOps) -> None:
        self._ops = ops

    async def call(self, context: MessageContext, name: str, arguments: str) -> Outcome:
        """The outcome of the call, or the reason it was refused; never raises on bad input."""
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return Refused("the arguments are not valid JSON.")
        if not isinstance(raw, dict):
            return Refused("the arguments must be a JSON object.")
        if raw.pop("scope", "personal") != "personal":
            return SHARED_REFUSAL
        target = Target.of(context, shared=False, channel=Channel.TOOL)
        if isinstance(target, Refused):
            return target
        try:
            return await self._dispatch(target, name, raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors()
            )
            return Refused(f"invalid arguments for {name}: {problems}")

    async def _dispatch(self, target: Target, name: str, raw: dict[str, Any]) -> Outcome:
        if name == "pin_set":
            return await self._set(target, SetArgs.model_validate(raw))
        if name == "pin_get":
            return await self._get(target, GetArgs.model_validate(raw).label)
        if name == "pin_delete":
            label = DeleteArgs.model_validate(raw).label
            return await self._ops.remove(target, label, protect_pinned=True)
        return Refused(f"there is no tool named '{name}'.")

    async def _set(self, target: Target, args: SetArgs) -> Outcome:
        """Create the block, or update it if it exists (never a pinned one)."""
        level = Level(args.level) if args.level else None
        content = args.content.strip()
        existing = find_block(await self._ops.blocks(target), args.label)
        if existing is None:
            outcome = await self._ops.add(
                target,
                args.label,
                content,
                level=level,
                pinned=args.pinned,
                priority=args.priority or 0,
            )
        else:
            outcome = await self._ops.change(
                target,
                args.label,
                content=content,
                level=level,
                state=State.PINNED if args.pinned else None,
                priority=args.priority,
                protect_pinned=True,
            )
        if not isinstance(outcome, Done):
            return outcome
        if existing is not None and existing.state is State.IDLE and not args.pinned:
            return Done(
                f"{outcome.message} It stays idle (not sent to the model) until the user sends "
                f"/pin activate {existing.label}."
            )
        return Done(outcome.message + NEXT_TURN)

    async def _get(self, target: Target, label: str | None) -> Outcome:
        blocks = await self._ops.blocks(target)
        if label is not None:
            found = find_block(blocks, label)
            if found is None:
                return Refused(f"there is no block labelled '{label}'.")
            blocks = [found]
        listed = [
            {
                "label": b.label,
                "content": b.content,
                "level": b.level.value,
                "state": b.state.value,
                "priority": b.priority,
            }
            for b in blocks
        ]
        return Done(json.dumps(listed, ensure_ascii=False))
