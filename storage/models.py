"""The records the store keeps: blocks, the changes made to them (who, through what, of which
kind), history entries, usage and delivered updates. Plain dataclasses, built from rows of our
own typed schema on every turn: input from users is validated before it reaches them."""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Generic, TypeVar


@functools.lru_cache(maxsize=65_536)  # every change looks its labels up several times
def label_key(label: str) -> str:
    """The form labels are compared in within a scope: NFKC-normalised and case-folded, so a
    full-width or differently cased look-alike of a label is the same label."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", label).casefold())


class Level(StrEnum):
    """Where a block goes: the system prompt (strong) or beside the user message (context)."""

    STRONG = "strong"
    CONTEXT = "context"


class State(StrEnum):
    """Lifecycle state: active and pinned blocks are injected, idle ones are not."""

    ACTIVE = "active"
    IDLE = "idle"
    PINNED = "pinned"


# Not frozen: that costs ~1.5 us per instance, and every turn builds one per block.
@dataclass(slots=True)
class Block:
    """One stored block of one scope, with its revision for optimistic concurrency. Treat it as
    read-only: changes go through the store."""

    id: int
    scope: str
    label: str
    content: str
    level: Level
    state: State
    priority: int
    created_at: datetime
    updated_at: datetime
    idle_since: datetime | None = None
    idle_calls: int | None = None
    rev: int = 0
    sensitive: bool = False  # kept whole; what the model and readers see of it is redacted
    triggers: tuple[str, ...] = ()  # keywords (as written) it waits for; none: sent always
    ends_at: datetime | None = None  # after it the block is not sent (it ends and goes idle)


@dataclass(frozen=True, slots=True)
class NewBlock:
    """A block about to be inserted; the store assigns its id."""

    scope: str
    label: str
    content: str
    level: Level
    state: State = State.ACTIVE
    priority: int = 0
    sensitive: bool = False
    triggers: tuple[str, ...] = ()
    ends_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class BlockState:
    """What a block is, apart from where and when: its content, level, state, priority,
    whether it is sensitive (stored whole, shown and sent redacted), the keywords it waits for
    (none: it goes with every request) and when it ends (None: never)."""

    content: str
    level: Level
    state: State
    priority: int = 0
    sensitive: bool = False
    triggers: tuple[str, ...] = ()
    ends_at: datetime | None = None

    @classmethod
    def of(cls, block: Block) -> BlockState:
        """The state of a stored block."""
        return cls(
            *(block.content, block.level, block.state, block.priority, block.sensitive),
            *(block.triggers, block.ends_at),
        )


@dataclass(frozen=True, slots=True)
class Version:
    """One change to a block of a scope, kept for a while: the block's state before it (None:
    the block did not exist), what changed (kind and detail), who made it, through what, when;
    op groups the versions of one operation, undone_by names the undo that reverted it."""

    id: int
    op: str
    scope: str
    label: str
    kind: ChangeKind
    detail: str
    actor: str
    channel: Channel
    at: datetime
    before: BlockState | None
    created_at: datetime | None = None  # the block's creation, when it existed before
    origin: Origin | None = None
    undone_by: str | None = None


# Not frozen (a change is built for every write; frozen costs ~1 us a field): read-only.
@dataclass(slots=True)
class Wanted:
    """A state a label of a scope should take (None: no block). created_at keeps a brought-back
    block's place in creation order; an import also gives the block's other times as they were
    (None: now, and an idle block's idle time counts from now)."""

    label: str
    state: BlockState | None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    idle_since: datetime | None = None
    idle_calls: int | None = None


# Not frozen (a change is built for every write; frozen costs ~1 us a field): read-only.
@dataclass(slots=True)
class Seen:
    """A label as a change was reviewed against it: its block and its mark (the operation of
    its newest kept version, '' when none is kept; None: not read, the block's id and revision
    decide)."""

    block: Block
    mark: str | None


WITHHELD = "[sensitive content withheld]"  # a sensitive content, where no finer mask is given
ABSENT = None  # what a BlockChange's `seen` says of a label that had no block when reviewed


# Not frozen (a change is built for every write; frozen costs ~1 us a field): read-only.
@dataclass(slots=True)
class BlockChange:
    """One change to the blocks of one scope, however it was asked for (a `/pin` verb, undo,
    restore, a proposal's approval, an import, the chat's pinned message, the agent tools, the
    web page): the state each label should take, who makes it through what and from where
    (change), and what it was decided against.

    seen maps each label key the change was reviewed against to the label as it was then
    (Seen) or ABSENT: the store refuses the change when any of them changed since. audited
    sends the change to the scope's audit trail (a group's shared blocks). kind names the
    whole change where one word does (clear, import); else each label's change is named by
    what differs. undoes marks an operation undone by this one; calls sets the scope's
    model-call count and history replaces its kept versions (an import). mask is how the audit
    trail masks sensitive content: whether to is decided here (audit_contents), from the states,
    never by the builder; the default withholds the content whole, the bot redacts it."""

    scope: str
    wanted: tuple[Wanted, ...]
    by: Author
    seen: Mapping[str, Seen | None] = field(default_factory=dict)
    audited: bool = False
    kind: ChangeKind | None = None
    undoes: str | None = None
    calls: int | None = None
    history: tuple[Version, ...] | None = None
    mask: Callable[[str], str] = field(default=lambda content: WITHHELD)
    # The builder's mask hides something new (parts the user marked): the label's earlier audit
    # entries are masked again with it.
    remask: bool = False

    def audit_contents(
        self, before: Block | BlockState | None, after: BlockState | None
    ) -> tuple[str | None, str | None]:
        """What the audit trail keeps of a label's content before and after the change (None:
        no block): masked where the block is sensitive, and the content before also where the
        change makes it sensitive (what it hid must not stay in the trail beside it). mask
        masks; without one a builder chose, a sensitive content is withheld whole."""
        hidden = after is not None and after.sensitive
        old = None if before is None else before.content
        if old is not None and (hidden or (before is not None and before.sensitive)):
            old = self.mask(old)
        new = None if after is None else (self.mask(after.content) if hidden else after.content)
        return old, new

    def turns_sensitive(self, before: Block | BlockState | None, after: BlockState | None) -> bool:
        """Whether this change makes a label of an audited scope sensitive, so the label's
        earlier audit entries must be masked with it."""
        return (
            self.audited
            and after is not None
            and after.sensitive
            and (before is None or not before.sensitive or self.remask)
        )

    @property
    def proposal(self) -> int | None:
        """The proposal this change carries out, if any: it is decided by this change."""
        origin = self.by.origin
        if origin is not None and self.by.channel is Channel.PROPOSAL:
            return origin.proposal
        return None


class Sql:
    """An SQL expression and its arguments, which `+`, `<=`, `|` and `&` combine as they combine
    numbers and truths: a rule written once over numbers (`Limits`') also gives the SQL
    that holds it inside a statement."""

    def __init__(self, text: str, *args: object) -> None:
        self.text, self.args = text, args

    def _join(self, op: str, other: Sql | int) -> Sql:
        if isinstance(other, Sql):
            return Sql(f"({self.text} {op} {other.text})", *self.args, *other.args)
        return Sql(f"({self.text} {op} {int(other)})", *self.args)

    def __add__(self, other: Sql | int) -> Sql:
        return self._join("+", other)

    def __le__(self, other: Sql | int) -> Sql:
        return self._join("<=", other)

    def __or__(self, other: Sql | bool) -> Sql:
        if isinstance(other, bool):  # a truth known in Python: always true, or the expression
            return Sql("1 = 1") if other else self
        return self._join("OR", other)

    def __and__(self, other: Sql) -> Sql:
        return self._join("AND", other)


_Number = TypeVar("_Number", int, Sql)


@dataclass(frozen=True, slots=True)
class Limits:
    """What a scope may hold: at most max_blocks blocks and max_total_chars characters of
    content (0: no budget); only growth past a limit breaks it. The rule is written once, here:
    the review and the store's check inside a transaction ask it with counts, and a write that
    reads nothing first holds it as SQL (`Sql`), changing nothing that would break a limit."""

    max_blocks: int
    max_total_chars: int = 0
    versions: int = 50  # versions kept per block, the newest

    def blocks_hold(self, count: _Number, new_count: _Number) -> _Number:
        """Whether a scope of count blocks may come to hold new_count."""
        return (new_count <= self.max_blocks) | (new_count <= count)

    def chars_hold(self, chars: _Number, new_chars: _Number) -> _Number:
        """Whether a scope of chars characters of content may come to hold new_chars."""
        budget = self.max_total_chars
        return (new_chars <= budget) | (new_chars <= chars) | (budget == 0)


class ChangeKind(StrEnum):
    """The kinds of change to a block, as the audit trail stores and filters them."""

    ADD = "add"
    EDIT = "edit"
    LEVEL = "level"
    STATE = "state"
    PRIORITY = "priority"
    REMOVE = "remove"
    CLEAR = "clear"
    IMPORT = "import"
    SENSITIVE = "sensitive"
    TRIGGERS = "triggers"  # the keywords a block waits for (detail: them, or "always")
    ENDS = "ends"  # when a block ends (detail: the time, or "never")
    SETTING = "setting"  # a group's (or topic's) own setting: the label names it
    # A version brought back (`/pin shared restore`, the web page's restore): in the audit trail
    # only, its detail what the restore changed ("content, level strong", "add context").
    RESTORE = "restore"


class Channel(StrEnum):
    """What a change came through."""

    COMMAND = "command"
    TOOL = "tool"
    WEB = "web"
    IMPORT = "import"
    CLEANUP = "cleanup"
    UNDO = "undo"
    RESTORE = "restore"
    PROPOSAL = "proposal"
    TELEGRAM_PIN = "telegram-pin"
    FORGET = "forget"  # a person's data removed at their request (or the operator's)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a change's content came from: a chat message (its id and author) or a proposal."""

    message_id: str | None = None
    author: str | None = None
    proposal: int | None = None

    def encode(self) -> str:
        """The origin as stored."""
        if self.proposal is not None:
            return f"proposal:{self.proposal}"
        return f"message:{self.message_id or ''}:{self.author or ''}"

    @classmethod
    def decode(cls, text: str | None) -> Origin | None:
        """An origin as encode() stored it (None for none)."""
        if not text:
            return None
        kind, _, rest = text.partition(":")
        if kind == "proposal":
            return cls(proposal=int(rest))
        message_id, _, author = rest.partition(":")
        return cls(message_id or None, author or None)


@dataclass(frozen=True, slots=True)
class Author:
    """Who makes a change (a sender id, or model, web, import, cleanup), through what, and
    where its content came from. Every write to a block carries one."""

    actor: str
    channel: Channel
    origin: Origin | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One change to a group's shared blocks: who made it, through what, of which kind (detail
    adds the new level, state or priority), with the content before and after (None where there
    was none)."""

    group_scope: str
    actor: str
    channel: Channel
    kind: ChangeKind
    detail: str
    label: str
    old_content: str | None
    new_content: str | None
    at: datetime
    origin: Origin | None = None

    @property
    def action(self) -> str:
        """The change in words, e.g. "add strong pinned", "level context", "remove"."""
        return f"{self.kind.value} {self.detail}".strip()


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One message of a conversation's history, as the model saw it (without injected blocks)."""

    id: int
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Model calls and their tokens, summed over some senders, chats and days."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    estimated_calls: int = 0
    cost: float = 0.0  # of the priced calls, in pricing.currency
    priced_calls: int = 0  # calls of a model with a price when they were made

    @property
    def billed_tokens(self) -> int:
        """Prompt plus completion tokens: what budgets count."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def known_cost(self) -> float | None:
        """The cost, or None when no call had a price."""
        return self.cost if self.priced_calls else None


@dataclass(frozen=True, slots=True)
class Budget:
    """One budget a model call is held against: a sender's (platform, sender) or a group's,
    over the UTC days first_day..last_day, in tokens or money (0: not that way)."""

    name: str  # the configuration key, e.g. "user_daily_tokens"
    first_day: str
    last_day: str
    sender: tuple[str, str] | None = None
    group_key: str | None = None
    tokens: int = 0
    cost: float = 0.0


@dataclass(frozen=True, slots=True)
class Hold:
    """What a model call in flight reserves: its tokens and cost at most, for its sender (None
    for a message without one) and its group ('' in a DM)."""

    platform: str
    sender: str | None
    group_key: str
    tokens: int
    cost: float


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Usage of one sender (platform, sender) or one group (platform, group_key) over days."""

    platform: str
    key: str  # the sender id, or the group's session key
    totals: UsageTotals


@dataclass(frozen=True, slots=True)
class PendingUpdate:
    """An update recorded on arrival and not yet done: its place in the inbox, the platform it
    came from, the platform's payload as received, and its answer when it was processed but
    the answer has not gone out yet (kept as the inbox wrote it; None before processing)."""

    seq: int
    platform: str
    payload: str
    replies: str | None = None


@dataclass(frozen=True, slots=True)
class Arrival:
    """An update as it was recorded: whether it was new (not a repeated delivery), and the
    chat's first waiting update when the worker that recorded it holds the chat now."""

    recorded: bool
    first: PendingUpdate | None


class ProposalStatus(StrEnum):
    """Where a proposal stands: waiting for a shared admin, or decided (and how)."""

    PENDING = "pending"
    APPLIED = "applied"
    REFUSED = "refused"
    REJECTED = "rejected"
    EXPIRED = "expired"


class SuggestionStatus(StrEnum):
    """Where a pin suggestion stands: waiting for its user, or decided (and how)."""

    PENDING = "pending"
    PINNED = "pinned"
    DISMISSED = "dismissed"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class NewProposal:
    """A proposed shared block for the group of scope, as the model made it: to add one
    (base_rev None) or to replace the content of the block at revision base_rev (whose content
    was base_content, at the version base_version)."""

    scope: str
    label: str
    content: str
    level: Level | None
    priority: int | None
    reason: str
    proposer: str
    base_rev: int | None = None
    base_content: str | None = None
    base_version: str | None = None


@dataclass(frozen=True, slots=True)
class NewSuggestion:
    """A suggested block for a DM user's scope: its label, content and why; content_key is the
    content as it was compared when stored (see bot.core.decisions.suggestions.content_key)."""

    scope: str
    label: str
    content: str
    reason: str
    content_key: str


_New = TypeVar("_New")
_Status = TypeVar("_Status")


@dataclass(frozen=True, slots=True)
class Decision(Generic[_New, _Status]):
    """A stored decision (a proposal or a pin suggestion): its short number within its scope,
    what it decides (new), where it stands, the message that shows it (chat and message id, once
    posted), and once decided when; a proposal also keeps who decided and, when an approval
    could not be applied, why (outcome)."""

    number: int
    new: _New
    status: _Status
    created_at: datetime
    expires_at: datetime
    chat: str | None = None
    message_id: str | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    outcome: str = ""


Proposal = Decision[NewProposal, ProposalStatus]
Suggestion = Decision[NewSuggestion, SuggestionStatus]


@dataclass(frozen=True, slots=True)
class StoreCheck:
    """What a health check read: the schema version, and the updates waiting in this worker's
    chats with when the oldest was recorded (seconds since the epoch; None when none waits)."""

    version: int
    waiting: int = 0
    oldest: float | None = None


@dataclass(frozen=True)
class Person:
    """One person of one platform, as their data is found: their id; the scopes of their
    blocks (their DM's, their personal scopes in groups); the history sessions wholly theirs
    (their DM's, their own in groups); the groups they took part in; their rate buckets' keys;
    and the chats whose delivery is theirs alone."""

    platform: str
    user: str
    scopes: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    buckets: tuple[str, ...] = ()
    chats: tuple[str, ...] = ()
