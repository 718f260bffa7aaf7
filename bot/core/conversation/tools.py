"""The agent tools over the speaker's personal scope, with the same limits and permissions as
/pin: one implementation, offered under one of two sets of names (`llm.tool_names`).

A tool set is data: for each operation (set, get, delete) the name the model calls and the
parameters it takes, each mapped onto the argument it fills. `pin` is pinbot's own set
(`pin_set` with `label`, `level` …); `sticky` is the Sticky Context design's (`sticky_set` with
`key`, `content`, `priority`, `pinned`). Both run the same operations with the same refusals; an
operation added later (such as a proposal) is one more entry in each set and one handler here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.core.blocks import (
    BlockOps,
    Done,
    Ends,
    Outcome,
    Refused,
    Rule,
    Target,
    find_block,
    keywords_problem,
    normal,
    parse_for,
    parse_until,
    refusal,
    shown_content,
)
from bot.core.decisions import Proposals
from bot.core.people import ChatKind, MessageContext
from bot.llm.base import Tool
from storage.models import Block, Channel, Level, State


class Op(StrEnum):
    """What a tool does, whatever it is called."""

    SET = "set"
    GET = "get"
    DELETE = "delete"
    PROPOSE = "propose"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SetArgs(_Args):
    """Arguments of a set: create a block, or update an existing one."""

    label: str
    content: str
    level: Literal["strong", "context"] | None = None
    pinned: bool | None = None
    priority: int | None = None
    sensitive: bool | None = None
    when: list[str] | None = None
    until: str | None = None


class GetArgs(_Args):
    """Arguments of a get: one block, or all without a label."""

    label: str | None = None


class DeleteArgs(_Args):
    """Arguments of a delete."""

    label: str


class ProposeArgs(_Args):
    """Arguments of a proposal: a shared block to add, or the new content of one."""

    label: str
    content: str
    level: Literal["strong", "context"] | None = None
    priority: int | None = None
    reason: str = ""


_ARGS: dict[Op, type[_Args]] = {
    Op.SET: SetArgs,
    Op.GET: GetArgs,
    Op.DELETE: DeleteArgs,
    Op.PROPOSE: ProposeArgs,
}


@dataclass(frozen=True)
class Param:
    """One parameter as a tool set names it: the name the model uses (wire), the argument it
    fills (field, of SetArgs, GetArgs or DeleteArgs) and its JSON schema."""

    wire: str
    field: str
    schema: Mapping[str, Any]
    required: bool = False


@dataclass(frozen=True)
class ToolDef:
    """One tool of a set: the operation, the name and description the model sees, the
    parameters."""

    op: Op
    name: str
    description: str
    params: tuple[Param, ...]

    def spec(self) -> Tool:
        """The function definition sent to the model."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {p.wire: dict(p.schema) for p in self.params},
                    **({"required": required} if (required := self._required()) else {}),
                    "additionalProperties": False,
                },
            },
        }

    def _required(self) -> list[str]:
        return [p.wire for p in self.params if p.required]

    def arguments(self, raw: Mapping[str, Any]) -> _Args:
        """The model's arguments, named as this tool names them, as the operation's arguments;
        ValidationError (naming parameters the way the model does) when they do not fit."""
        by_wire = {p.wire: p.field for p in self.params}
        unknown = [key for key in raw if key not in by_wire]
        if unknown:
            takes = ", ".join(p.wire for p in self.params)
            raise _Invalid(f"{unknown[0]}: unknown parameter; {self.name} takes {takes}")
        model = _ARGS[self.op]
        try:
            return model.model_validate({by_wire[key]: value for key, value in raw.items()})
        except ValidationError as error:
            by_field = {p.field: p.wire for p in self.params}

            def where(loc: tuple[int | str, ...]) -> str:
                return ".".join(by_field.get(str(part), str(part)) for part in loc) or "arguments"

            problems = "; ".join(f"{where(e['loc'])}: {e['msg']}" for e in error.errors())
            raise _Invalid(problems) from None


class _Invalid(Exception):
    """Arguments that do not fit a tool; the message says which and why."""


@dataclass(frozen=True)
class Timed:
    """A set's arguments with its keywords and end read (None: as the block is; for a new
    block, sent always and never ending)."""

    args: SetArgs
    triggers: tuple[str, ...] | None = None
    ends: Ends | None = None


def _timed(args: SetArgs) -> Timed:
    """args with `when` and `until` read by the rules of `/pin`'s --when, --until and --for;
    _Invalid says what is wrong with them."""
    triggers = None if args.when is None else _keywords(args.when)
    return Timed(args, triggers, None if args.until is None else _ends(args.until.strip()))


def _keywords(items: Sequence[str]) -> tuple[str, ...]:
    """`when`'s keywords, each as written (without spaces around it, the same keyword in
    another case once), by the rules of `/pin`'s --when."""
    keywords: list[str] = []
    for item in items:
        keyword = item.strip()
        if not keyword:
            raise _Invalid("when: a keyword is empty; give each keyword as one item")
        if normal(keyword) not in (normal(k) for k in keywords):
            keywords.append(keyword)
    if problem := keywords_problem(keywords):
        raise _Invalid(f"when: {problem}")
    return tuple(keywords)


def _ends(text: str) -> Ends:
    """`until`'s end: a date or date-time (`/pin`'s --until), a duration (its --for), or
    nothing (empty or '-': the block never ends)."""
    if text in ("", "-"):
        return Ends()
    read = parse_for(text) if _DURATION_LIKE.fullmatch(text) else parse_until(text)
    if isinstance(read, str):  # what is wrong, with an example in the tool's own words
        raise _Invalid(f"until: {read.split('; write')[0]}; write e.g. {UNTIL_EXAMPLE}")
    return read


Record = Callable[[Block, str], dict[str, Any]]


def _timing(block: Block) -> dict[str, Any]:
    """When a block goes with requests, as the tools read it: the keywords it waits for ([]:
    every request) and its end (ISO 8601 in UTC, or null: never)."""
    until = None if block.ends_at is None else block.ends_at.astimezone(UTC).isoformat()
    return {"when": list(block.triggers), "until": until}


def _pin_record(block: Block, label: str) -> dict[str, Any]:
    """A block as the model reads it: a sensitive one redacted."""
    return {
        label: block.label,
        "content": shown_content(block),
        "level": block.level.value,
        "state": block.state.value,
        "priority": block.priority,
        "sensitive": block.sensitive,
        **_timing(block),
    }


def _sticky_record(block: Block, label: str) -> dict[str, Any]:
    """A slot as the Sticky Context design reads it (key, content, priority, pinned, sensitive;
    a sensitive slot's content redacted), with the level, state, keywords and end pinbot
    adds."""
    return {
        label: block.label,
        "content": shown_content(block),
        "priority": block.priority,
        "pinned": block.state is State.PINNED,
        "sensitive": block.sensitive,
        "level": block.level.value,
        "state": block.state.value,
        **_timing(block),
    }


@dataclass(frozen=True)
class ToolSet:
    """The agent tools under one set of names; `specs` is built once, so every request offers
    byte-identical definitions."""

    name: str
    label: str  # the parameter (and the result field) that names a block
    tools: tuple[ToolDef, ...]
    record: Record
    propose: ToolDef  # offered besides the others in groups where pins work
    specs: list[Tool] = field(init=False, compare=False, repr=False)
    group_specs: list[Tool] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "specs", [tool.spec() for tool in self.tools])
        object.__setattr__(self, "group_specs", [*self.specs, self.propose.spec()])

    def find(self, name: str) -> ToolDef | None:
        """The tool of this set called name, if any."""
        return next((tool for tool in (*self.tools, self.propose) if tool.name == name), None)


_SCOPE_NOTE = "Works only on the current speaker's personal blocks, never on shared group blocks."
_CONTENT = Param("content", "content", {"type": "string"}, required=True)
_LEVEL = Param(
    "level",
    "level",
    {
        "type": "string",
        "enum": ["strong", "context"],
        "description": "strong: a continuing rule; context: reference material",
    },
)
_PINNED = Param(
    "pinned", "pinned", {"type": "boolean", "description": "keep until the user removes it"}
)
_PRIORITY = Param(
    "priority", "priority", {"type": "integer", "description": "higher comes first; default 0"}
)
_SENSITIVE = Param(
    "sensitive",
    "sensitive",
    {
        "type": "boolean",
        "description": "kept whole, but addresses, hosts and secrets in it are masked when read",
    },
)

_WHEN = Param(
    "when",
    "when",
    {
        "type": "array",
        "items": {"type": "string"},
        "description": "keywords, one per item: the block is sent only when the latest messages "
        "mention one (any case, whole words); [] sends it with every request; left out, as it is",
    },
)
_UNTIL = Param(
    "until",
    "until",
    {
        "type": "string",
        "description": "when the block stops being sent: a date or date-time in UTC (2026-12-24, "
        '2026-12-24T18:00) or a duration from now (3d, 12h, 1w2d); "-" never ends; left out, '
        "as it is",
    },
)
UNTIL_EXAMPLE = "2026-12-24, 2026-12-24T18:00 (UTC, or with +08:00), or 3d, 12h, 1w2d"
_DURATION_LIKE = re.compile(r"[0-9]+[wdhm][0-9wdhm]*", re.IGNORECASE)


_REASON = Param(
    "reason",
    "reason",
    {"type": "string", "description": "one short sentence: why the group should keep this"},
)
_PROPOSE_NOTE = (
    "Propose a shared block for this group, or new content for an existing one: the proposal "
    "is posted in the group and the group's shared admins approve or reject it. Use it for what "
    "the whole group agreed and should keep (a decision, a convention, a deadline)."
)


def _label(wire: str, *, required: bool, describe: bool = False) -> Param:
    schema: dict[str, Any] = {"type": "string"}
    if describe:
        schema["description"] = "short name, no spaces"
    return Param(wire, "label", schema, required)


PIN_TOOLS = ToolSet(
    "pin",
    "label",
    (
        ToolDef(
            Op.SET,
            "pin_set",
            "Create or update a pinned block that is sent with every later request (with "
            "`when`, only with those that mention a keyword; with `until`, until then). "
            + _SCOPE_NOTE
            + " Pinned blocks cannot be changed; pinned and sensitive cannot be taken back.",
            (
                *(_label("label", required=True, describe=True), _CONTENT, _LEVEL, _PINNED),
                *(_PRIORITY, _SENSITIVE, _WHEN, _UNTIL),
            ),
        ),
        ToolDef(
            Op.GET,
            "pin_get",
            "Read one pinned block by label, or list them all without a label. " + _SCOPE_NOTE,
            (_label("label", required=False),),
        ),
        ToolDef(
            Op.DELETE,
            "pin_delete",
            "Delete a pinned block by label. Pinned blocks cannot be deleted. " + _SCOPE_NOTE,
            (_label("label", required=True),),
        ),
    ),
    _pin_record,
    ToolDef(
        Op.PROPOSE,
        "pin_propose",
        _PROPOSE_NOTE,
        (_label("label", required=True, describe=True), _CONTENT, _LEVEL, _PRIORITY, _REASON),
    ),
)
_STICKY_NOTE = "Works only on the current speaker's personal slots, never on shared group slots."
STICKY_TOOLS = ToolSet(
    "sticky",
    "key",
    (
        ToolDef(
            Op.SET,
            "sticky_set",
            "Create or update a sticky slot; it is sent with every later request. "
            + _STICKY_NOTE
            + " Pinned slots cannot be changed; pinned and sensitive cannot be taken back.",
            (_label("key", required=True, describe=True), _CONTENT, _PRIORITY, _PINNED, _SENSITIVE),
        ),
        ToolDef(
            Op.GET,
            "sticky_get",
            "Read one slot (by key) or list all slots (no key). " + _STICKY_NOTE,
            (_label("key", required=False),),
        ),
        ToolDef(
            Op.DELETE,
            "sticky_delete",
            "Remove a slot. Cannot delete pinned slots. " + _STICKY_NOTE,
            (_label("key", required=True),),
        ),
    ),
    _sticky_record,
    ToolDef(
        Op.PROPOSE,
        "sticky_propose",
        _PROPOSE_NOTE.replace("block", "slot"),
        (_label("key", required=True, describe=True), _CONTENT, _LEVEL, _PRIORITY, _REASON),
    ),
)
TOOL_SETS: dict[str, ToolSet] = {tools.name: tools for tools in (PIN_TOOLS, STICKY_TOOLS)}

SHARED_REFUSAL = refusal(Rule.TOOLS_PERSONAL)
NEXT_TURN = " It applies from the next turn."


def tool_message(outcome: Outcome) -> str:
    """The text a tool result carries back to the model."""
    return outcome.message if isinstance(outcome, Done) else f"Refused: {outcome.reason}"


class PinTools:
    """Runs one tool call for the speaker of a message, over the same operations as /pin."""

    def __init__(
        self, ops: BlockOps, tools: ToolSet = PIN_TOOLS, proposals: Proposals | None = None
    ) -> None:
        self._ops = ops
        self.tools = tools
        self._proposals = proposals
        self._handlers: dict[Op, Callable[[Target, Any], Awaitable[Outcome]]] = {
            Op.SET: self._set,
            Op.GET: self._get,
            Op.DELETE: self._delete,
        }

    @property
    def specs(self) -> list[Tool]:
        """The definitions offered to the model in a private chat."""
        return self.tools.specs

    def offered(self, context: MessageContext) -> list[Tool]:
        """The definitions offered to the model for this message: in a group where pins work
        (and proposals can be made), the proposal tool too."""
        group = context.conversation.kind is ChatKind.GROUP
        return self.tools.group_specs if group and self._proposals else self.tools.specs

    async def call(self, context: MessageContext, name: str, arguments: str) -> Outcome:
        """The outcome of the call, or the reason it was refused; never raises on bad input."""
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return refusal(Rule.TOOL_NOT_JSON)
        if not isinstance(raw, dict):
            return refusal(Rule.TOOL_NOT_OBJECT)
        if raw.pop("scope", "personal") != "personal":
            return SHARED_REFUSAL
        target = Target.of(context, shared=False, channel=Channel.TOOL)
        if isinstance(target, Refused):
            return target
        tool = self.tools.find(name)
        if tool is None:
            return refusal(Rule.TOOL_UNKNOWN, name=name)
        try:
            args = tool.arguments(raw)
            read: _Args | Timed = _timed(args) if isinstance(args, SetArgs) else args
        except _Invalid as invalid:
            return refusal(Rule.TOOL_ARGUMENTS, name=name, problem=invalid)
        if isinstance(args, ProposeArgs):
            return await self._propose(context, args)
        return await self._handlers[tool.op](target, read)

    async def _propose(self, context: MessageContext, args: ProposeArgs) -> Outcome:
        if self._proposals is None or context.conversation.kind is not ChatKind.GROUP:
            return refusal(Rule.PROPOSALS_SHARED_ONLY)
        return await self._proposals.propose(
            context,
            args.label,
            args.content,
            level=Level(args.level) if args.level else None,
            priority=args.priority,
            reason=args.reason,
        )

    async def _set(self, target: Target, timed: Timed) -> Outcome:
        """Create the block, or update it if it exists (never a pinned one). pinned, sensitive,
        when and until left out keep what the block is; false on a block that is pinned or
        sensitive asks to take it back, which the block policy refuses the model."""
        args = timed.args
        level = Level(args.level) if args.level else None
        content = args.content.strip()
        existing = find_block(await self._ops.blocks(target), args.label)
        if existing is None:
            outcome = await self._ops.add(
                target,
                args.label,
                content,
                level=level,
                pinned=bool(args.pinned),
                priority=args.priority or 0,
                sensitive=bool(args.sensitive),
                triggers=timed.triggers or (),
                ends=timed.ends,
            )
        else:
            state = State.PINNED if args.pinned else None
            if args.pinned is False and existing.state is State.PINNED:
                state = State.ACTIVE
            outcome = await self._ops.change(
                target,
                args.label,
                content=content,
                level=level,
                state=state,
                priority=args.priority,
                sensitive=args.sensitive,
                triggers=timed.triggers,
                ends=timed.ends,
            )
        if not isinstance(outcome, Done):
            return outcome
        if existing is not None and existing.state is State.IDLE and await self._idle(target, args):
            return Done(
                f"{outcome.message} It stays idle (not sent to the model) until the user sends "
                f"/pin activate {existing.label}."
            )
        return Done(outcome.message + NEXT_TURN)

    async def _idle(self, target: Target, args: SetArgs) -> bool:
        """Whether the block a set changed is idle still (a new end can bring back one that had
        ended)."""
        block = find_block(await self._ops.blocks(target), args.label)
        return block is not None and block.state is State.IDLE

    async def _get(self, target: Target, args: GetArgs) -> Outcome:
        blocks = await self._ops.blocks(target)
        if args.label is not None:
            found = find_block(blocks, args.label)
            if found is None:
                return refusal(Rule.MISSING, target.where, label=args.label)
            blocks = [found]
        listed = [self.tools.record(b, self.tools.label) for b in blocks]
        return Done(json.dumps(listed, ensure_ascii=False))

    async def _delete(self, target: Target, args: DeleteArgs) -> Outcome:
        return await self._ops.remove(target, args.label)
