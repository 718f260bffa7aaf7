"""The block policy: every rule a block change meets, whoever makes it and however (`/pin`, undo
and restore, a proposal's approval, the agent tools, import, the chat's pinned message, the web
page): default levels, label and content rules, the credential check, priorities, permissions,
the pinned blocks the model may not touch, limits and the character budget; and idle retention
and the token warning. `BlockPolicy.review` is the one check of a change. Every refusal the bot
gives (of a block rule, or of how something was asked: `Rule.block_rule`) has a code (`Rule`)
and one English text here, which says what to do."""

from __future__ import annotations

import dataclasses
import functools
import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from bot import metrics
from bot.config import PinsConfig
from bot.core.blocks.ends import end_problem as end_words
from bot.core.blocks.triggers import MAX_KEYWORD_CHARS, MAX_KEYWORDS, keywords_problem
from bot.core.people import Action, Speaker
from bot.secrets import credential_kind, has_marks, has_placeholder
from storage.models import (
    Block,
    BlockChange,
    BlockState,
    Channel,
    Level,
    Limits,
    State,
    Wanted,
    label_key,
)

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
_ALLOWED_CONTROLS = {"\n", "\r", "\t"}
_WITHOUT_ALLOWED_CONTROLS = str.maketrans(dict.fromkeys(_ALLOWED_CONTROLS))
# Invisible and direction-control characters (Cf) could make two labels look alike, or a label
# look like something else; content may hold them (e.g. joiners in emoji and scripts).
_LABEL_CATEGORIES = ("Cc", "Cs", "Cf")
_CONTENT_CATEGORIES = ("Cc", "Cs")
# Characters that reorder how text around them is shown: free text could look like other text.
_DIRECTION_CONTROLS = frozenset(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
)
_QUOTES = "\"'`“”‘’„«»「」『』"
_DAY = timedelta(days=1)
# Content the model wrote: it sees sensitive blocks only redacted.
_MODEL_CHANNELS = frozenset({Channel.TOOL, Channel.PROPOSAL})
# Changes that bring back what a label held: they never make a sensitive label plain.
_HISTORY_CHANNELS = frozenset({Channel.UNDO, Channel.RESTORE})
# Changes that keep a label sensitive when it was, also across its removal: only a person's
# `/pin sensitive <label> off` (or `/pin shared sensitive`) makes a block plain.
_KEEPS_SENSITIVE = _MODEL_CHANNELS | _HISTORY_CHANNELS
MAX_RECORDED_CHARS = 200  # of an actor, an operation id or a detail that an import brings


class Rule(StrEnum):
    """Why something was refused: one code per rule, each with one text (RULE_TEXTS); most
    are rules of blocks (block_rule), the rest say why what was asked cannot be done."""

    LABEL_EMPTY = "label-empty"
    LABEL_TOO_LONG = "label-too-long"
    LABEL_SPACE = "label-space"
    LABEL_QUOTED = "label-quoted"
    LABEL_CHARACTER = "label-character"
    LABEL_OPTION = "label-option"
    LABEL_MARKED = "label-marked"
    CONTENT_EMPTY = "content-empty"
    CONTENT_TOO_LONG = "content-too-long"
    CONTENT_CHARACTER = "content-character"
    TEXT_CHARACTER = "text-character"
    TEXT_TOO_LONG = "text-too-long"
    CREDENTIAL = "credential"
    PRIORITY = "priority"
    TRIGGERS = "triggers"
    ENDS = "ends"
    NOT_ALLOWED = "not-allowed"
    PINNED = "pinned"
    LOWERED = "lowered"
    MASKED = "masked"
    TOO_MANY = "too-many"
    OVER_BUDGET = "over-budget"
    LABEL_TAKEN = "label-taken"
    MISSING = "missing"
    STALE = "stale"
    BUSY = "busy"
    AS_IT_WAS = "as-it-was"
    # --- Not block rules from here on (block_rule): what was asked cannot be done as asked.
    PINS_OFF = "pins-off"
    NO_HISTORY = "no-history"
    NOTHING_TO_UNDO = "nothing-to-undo"
    NO_VERSION = "no-version"
    VERSION_ABSENT = "version-absent"
    ADD_NEEDS_CONTENT = "add-needs-content"
    REPLY_UNREADABLE = "reply-unreadable"
    REPLY_NO_TEXT = "reply-no-text"
    REPLY_COMMAND = "reply-command"
    REPLY_TOO_LONG = "reply-too-long"
    TOOLS_PERSONAL = "tools-personal"
    TOOL_NOT_JSON = "tool-not-json"
    TOOL_NOT_OBJECT = "tool-not-object"
    TOOL_UNKNOWN = "tool-unknown"
    TOOL_ARGUMENTS = "tool-arguments"
    PROPOSALS_SHARED_ONLY = "proposals-shared-only"
    # --- The decisions package's refusals (proposals.py, suggestions.py), for its rewrite to
    # use; the two that wrap a block rule's refusal (*_NOT_*) are block rules.
    PROPOSAL_SAME = "proposal-same"
    PROPOSALS_FULL = "proposals-full"
    NO_PROPOSAL = "no-proposal"
    PROPOSAL_DECIDED = "proposal-decided"
    PROPOSAL_EXPIRED = "proposal-expired"
    PROPOSAL_NOT_APPLIED = "proposal-not-applied"
    ADMINS_ONLY = "admins-only"
    SUGGESTIONS_DM_ONLY = "suggestions-dm-only"
    NO_SUGGESTION = "no-suggestion"
    SUGGESTION_DECIDED = "suggestion-decided"
    SUGGESTION_EXPIRED = "suggestion-expired"
    SUGGESTION_NOT_SAVED = "suggestion-not-saved"

    @property
    def block_rule(self) -> bool:
        """Whether this is a rule of blocks (counted as `block_rules` in bot.metrics), not a
        refusal of how something was asked (a tool's arguments, a decided proposal, ...)."""
        return self in _BLOCK_RULES


# The block rules: those before PINS_OFF, and the decisions' refusals that wrap one.
_BLOCK_RULES = frozenset(list(Rule)[: list(Rule).index(Rule.PINS_OFF)]) | {
    Rule.PROPOSAL_NOT_APPLIED,
    Rule.SUGGESTION_NOT_SAVED,
}


# Each rule's text; {noun} names the scope's blocks ("your blocks"), {pin} the command that
# manages them ("/pin" or "/pin shared").
RULE_TEXTS: dict[Rule, str] = {
    Rule.LABEL_EMPTY: "A label cannot be empty.",
    Rule.LABEL_TOO_LONG: (
        "The label is {length} characters long; the limit is {limit} (pins.max_label_length). "
        "Choose a shorter label."
    ),
    Rule.LABEL_SPACE: "A label cannot contain spaces or line breaks. Use '-' or '_' instead.",
    Rule.LABEL_QUOTED: (
        "Labels are one word and need no quotes: write /pin add tone Be brief. Remove the "
        "quotes and try again."
    ),
    Rule.LABEL_CHARACTER: (
        "The label contains an invisible or control character ({character}). Type the label "
        "again without it."
    ),
    Rule.LABEL_OPTION: "A label cannot start with '--'; that marks options. Choose another label.",
    Rule.LABEL_MARKED: (
        "A label cannot hold '||': marks hide parts of a block's content, and a label is always "
        "shown. Choose a plain label and mark the secret in the content."
    ),
    Rule.CONTENT_EMPTY: "The content is empty. Write the text to pin after the label.",
    Rule.CONTENT_TOO_LONG: (
        "The content is {length} characters long; the limit is {limit} "
        "(pins.max_content_length). Shorten it and try again."
    ),
    Rule.CONTENT_CHARACTER: (
        "The content contains a control character ({character}); only line breaks and tabs "
        "are allowed. Remove it and try again."
    ),
    Rule.TEXT_CHARACTER: (
        "The {what} contains a control character ({character}); remove it and try again."
    ),
    Rule.TEXT_TOO_LONG: (
        "The {what} is {length} characters long; the limit is {limit}. Shorten it and try again."
    ),
    Rule.CREDENTIAL: (
        "Not saved: this looks like {kind}. What is pinned or proposed in a group can be "
        "revealed to every member (the model may repeat it), so do not put secrets here; keep "
        "them out of chats. (The operator can turn this check off with "
        "pins.refuse_secrets_in_groups: false.)"
    ),
    Rule.PRIORITY: "Priority must be a whole number from {low} to {high}.",
    Rule.TRIGGERS: (
        "The keywords cannot be used: {problem}. A block waits for at most "
        f"{MAX_KEYWORDS} plain keywords of at most {MAX_KEYWORD_CHARS} characters each, "
        'separated by commas (double quotes around one with spaces): --when deploy,"release notes".'
    ),
    Rule.ENDS: "The end cannot be used: {problem}.",
    Rule.NOT_ALLOWED: "{reason}",
    Rule.PINNED: ("Block '{label}' is pinned; only the user can change or remove it, with /pin."),
    Rule.LOWERED: (
        "Block '{label}' is {flag}. The model may mark a block pinned or sensitive but never "
        "take that back; only the user can, with {command}."
    ),
    Rule.MASKED: (
        "Not saved: block '{label}' is sensitive, and the new content holds placeholders such "
        "as [ip] or [secret] where its addresses and secrets are masked. You cannot see the "
        "masked parts, so saving would replace them with the placeholders. Ask the user to "
        "edit it with {pin} edit {label} <new content>."
    ),
    Rule.TOO_MANY: (
        "{Noun} would hold {count} blocks; the limit is {limit} "
        "(pins.max_blocks_per_session). Remove one with {pin} remove <label> first."
    ),
    Rule.OVER_BUDGET: (
        "That would bring {noun} to {total} characters, over the budget of {budget} "
        "(pins.max_total_chars). Shorten or remove a block first."
    ),
    Rule.LABEL_TAKEN: (
        "A block labelled '{label}' already exists in {noun}. Use {pin} edit {label} "
        "<new content> to change it."
    ),
    Rule.MISSING: "There is no block labelled '{label}' in {noun}. Send {pin} list to see them.",
    Rule.STALE: (
        "Block '{label}' changed after this was asked for; nothing was saved. Send {pin} list "
        "to see it as it is now."
    ),
    Rule.BUSY: "The blocks changed while saving; nothing was saved. Please try again.",
    # An undo or restore that a rule of now refuses: because is that rule's refusal.
    Rule.AS_IT_WAS: "{labels} cannot come back as it was: {because}",
    Rule.PINS_OFF: "Pins are not available here.",
    Rule.NO_HISTORY: (
        "No changes to a block labelled '{label}' are kept in {noun}. Send {pin} list to see "
        "the blocks."
    ),
    Rule.NOTHING_TO_UNDO: "There is nothing to undo in {noun}.",
    Rule.NO_VERSION: "'{label}' has {kept} in {noun}; send {pin} history {label} to see them.",
    Rule.VERSION_ABSENT: (
        "Version {number} of '{label}' is the block's absence; to remove the block, send "
        "{pin} remove {label}."
    ),
    Rule.ADD_NEEDS_CONTENT: (
        "The block '{label}' needs content after its label, or send the command as a reply to "
        "the message to pin (without content).\nUsage: {pin} {usage}"
    ),
    # Why the platform would not give the replied message: its adapter words it.
    Rule.REPLY_UNREADABLE: "{problem}",
    Rule.REPLY_NO_TEXT: (
        "The message you replied to has no text to pin (a photo without a caption, a sticker, "
        "a file). Write the content after the label instead."
    ),
    Rule.REPLY_COMMAND: (
        "The message you replied to is itself a /pin command; reply to the message you want to pin."
    ),
    Rule.REPLY_TOO_LONG: (
        "The message you replied to is {length:,} characters long; the limit is {limit:,} "
        "(pins.max_content_length). Quote the part to pin (select it and reply), or write the "
        "content after the label."
    ),
    # What the model is told (after "Refused: ").
    Rule.TOOLS_PERSONAL: (
        "The tools work only on the speaker's personal blocks; shared group blocks are managed "
        "by the group's shared admins with /pin shared."
    ),
    Rule.TOOL_NOT_JSON: "the arguments are not valid JSON.",
    Rule.TOOL_NOT_OBJECT: "the arguments must be a JSON object.",
    Rule.TOOL_UNKNOWN: "there is no tool named '{name}'.",
    Rule.TOOL_ARGUMENTS: "invalid arguments for {name}: {problem}",
    Rule.PROPOSALS_SHARED_ONLY: "proposals are for a group's shared blocks; use the set tool here.",
    # --- The decisions package's (see Rule); {decided} is how it was decided ("approved").
    Rule.PROPOSAL_SAME: "the shared block '{label}' already has this content.",
    Rule.PROPOSALS_FULL: (
        "this group already has {limit} pending proposals (pins.max_pending_proposals); wait "
        "until an admin decides one."
    ),
    Rule.NO_PROPOSAL: (
        "There is no proposal #{number} in this group. Send /pin shared proposals to see the "
        "pending ones."
    ),
    Rule.PROPOSAL_DECIDED: "Proposal #{number} was {decided} already.",
    Rule.PROPOSAL_EXPIRED: "Proposal #{number} expired without a decision; nothing changed.",
    Rule.PROPOSAL_NOT_APPLIED: "Proposal #{number} could not be applied: {because}",
    Rule.ADMINS_ONLY: "Only this group's shared admins can approve or reject proposals.",
    Rule.SUGGESTIONS_DM_ONLY: (
        "Pin suggestions are made in DMs; in a group the model's suggestions become proposals "
        "to its shared admins (/pin shared proposals)."
    ),
    Rule.NO_SUGGESTION: (
        "There is no pin suggestion #{number} here. Send /pin suggestions to see the waiting ones."
    ),
    Rule.SUGGESTION_DECIDED: "Suggestion #{number} was {decided} already.",
    Rule.SUGGESTION_EXPIRED: "Suggestion #{number} expired; nothing was saved.",
    Rule.SUGGESTION_NOT_SAVED: "Suggestion #{number} was not saved: {because}",
}


@dataclass(frozen=True)
class Done:
    """The operation happened (or there was nothing to change); message says what, in English."""

    message: str


@dataclass(frozen=True)
class Refused:
    """The operation changed nothing; reason says why and how to fix it, in English: the text
    of code, the rule that refused it. Built only by `refusal`."""

    reason: str
    code: Rule


Outcome = Done | Refused


@dataclass(frozen=True)
class Where:
    """The blocks a change is made to, as replies name them: a group's shared blocks, a
    member's personal blocks in a group, or a DM user's blocks."""

    shared: bool
    group: bool

    @functools.cached_property
    def noun(self) -> str:
        """How replies name these blocks."""
        if self.shared:
            return "this group's shared blocks"
        return "your personal blocks in this group" if self.group else "your blocks"

    @property
    def pin(self) -> str:
        """The command that manages these blocks."""
        return "/pin shared" if self.shared else "/pin"


DM = Where(shared=False, group=False)


def refusal(rule: Rule, where: Where = DM, **facts: Any) -> Refused:
    """The refusal of rule, its text filled in with facts (and how replies name the blocks)."""
    noun = where.noun
    text = RULE_TEXTS[rule].format(
        noun=noun, Noun=noun[0].upper() + noun[1:], pin=where.pin, **facts
    )
    return Refused(text, rule)


def count_refusal(outcome: Outcome) -> Outcome:
    """outcome, counted (bot.metrics) when a block rule refused it: called where an outcome
    reaches whoever asked (a reply, the model, the web page), never where a refusal is built
    (a refusal may be built and never given)."""
    if isinstance(outcome, Refused) and outcome.code.block_rule:
        metrics.refused("block_rules")
    return outcome


def _bad_character(text: str, categories: tuple[str, ...], *, controls: bool) -> str | None:
    """The first character of text in one of categories, as U+XXXX, or None; with controls,
    line breaks and tabs are allowed."""
    # Every character of Cc, Cs and Cf is unprintable to Python, so printable text (nearly all
    # text, once its allowed line breaks are set aside) needs no look at each character.
    if (text.translate(_WITHOUT_ALLOWED_CONTROLS) if controls else text).isprintable():
        return None
    allowed = _ALLOWED_CONTROLS if controls else set()
    for char in text:
        if char not in allowed and unicodedata.category(char) in categories:
            return f"U+{ord(char):04X}"
    return None


def priority_problem(priority: int | None) -> Refused | None:
    """Why this priority cannot be used (None: not a whole number), or None if it is fine."""
    if priority is not None and PRIORITY_MIN <= priority <= PRIORITY_MAX:
        return None
    return refusal(Rule.PRIORITY, low=PRIORITY_MIN, high=PRIORITY_MAX)


def text_problem(text: str, what: str, limit: int) -> Refused | None:
    """Why free text recorded with a change (an actor, a reason) cannot be kept: a control or
    direction-control character, or more than limit characters; None if it is fine."""
    bad = _bad_character(text, _CONTENT_CATEGORIES, controls=False) or next(
        (f"U+{ord(char):04X}" for char in text if char in _DIRECTION_CONTROLS), None
    )
    if bad:
        return refusal(Rule.TEXT_CHARACTER, what=what, character=bad)
    if len(text) > limit:
        return refusal(Rule.TEXT_TOO_LONG, what=what, length=len(text), limit=limit)
    return None


def default_level(group: bool) -> Level:
    """The level of an add that names none: context in a group, strong in a DM."""
    return Level.CONTEXT if group else Level.STRONG


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _secret_text(label: str, state: BlockState) -> str:
    """What of a block a group can read, for the credential check: label, content, keywords."""
    return " ".join([label, state.content, *state.triggers])


class BlockPolicy:
    """The rules of pins.* for blocks, in one place."""

    def __init__(self, pins: PinsConfig) -> None:
        self.pins = pins
        self.limits = Limits(
            pins.max_blocks_per_session, pins.max_total_chars, pins.history_per_block
        )

    def label_problem(self, label: str) -> Refused | None:
        """Why this label cannot be used, or None if it is fine."""
        if not label:
            return refusal(Rule.LABEL_EMPTY)
        if len(label) > self.pins.max_label_length:
            return refusal(Rule.LABEL_TOO_LONG, length=len(label), limit=self.pins.max_label_length)
        if any(char.isspace() for char in label):
            return refusal(Rule.LABEL_SPACE)
        if label[0] in _QUOTES or label[-1] in _QUOTES:
            return refusal(Rule.LABEL_QUOTED)
        if bad := _bad_character(label, _LABEL_CATEGORIES, controls=False):
            return refusal(Rule.LABEL_CHARACTER, character=bad)
        if label.startswith("--"):
            return refusal(Rule.LABEL_OPTION)
        if "||" in label:
            return refusal(Rule.LABEL_MARKED)
        return None

    def content_problem(self, content: str) -> Refused | None:
        """Why this (already trimmed) content cannot be stored, or None if it is fine."""
        if not content:
            return refusal(Rule.CONTENT_EMPTY)
        if len(content) > self.pins.max_content_length:
            return refusal(
                Rule.CONTENT_TOO_LONG, length=len(content), limit=self.pins.max_content_length
            )
        if bad := _bad_character(content, _CONTENT_CATEGORIES, controls=True):
            return refusal(Rule.CONTENT_CHARACTER, character=bad)
        return None

    @staticmethod
    def triggers_problem(triggers: Sequence[str]) -> Refused | None:
        """Why these keywords cannot be a block's (the rules of bot.core.blocks.triggers), or
        None."""
        problem = keywords_problem(triggers) if triggers else None
        return None if problem is None else refusal(Rule.TRIGGERS, problem=problem)

    @staticmethod
    def end_problem(ends_at: datetime | None, now: datetime) -> Refused | None:
        """Why a person may not give a block this end now (passed, or too far), or None."""
        problem = end_words(ends_at, now) if ends_at is not None else None
        return None if problem is None else refusal(Rule.ENDS, problem=problem)

    def secret_problem(self, text: str, *, group: bool) -> Refused | None:
        """Why text (a block's label and content, a proposal's reason) looks like it holds a
        credential where a group can see it, or None."""
        if not group or not self.pins.refuse_secrets_in_groups:
            return None
        kind = credential_kind(text)
        return None if kind is None else refusal(Rule.CREDENTIAL, kind=kind)

    def state_problem(
        self, label: str, state: BlockState, *, group: bool, new_label: bool = True
    ) -> Refused | None:
        """The first rule a block's label (when it comes into being), content and priority
        break, or None."""
        return (
            (self.label_problem(label) if new_label else None)
            or self.content_problem(state.content)
            or priority_problem(state.priority)
            or self.triggers_problem(state.triggers)
            or (self.secret_problem(_secret_text(label, state), group=True) if group else None)
        )

    def limits_problem(
        self, blocks: Sequence[Block], after: Sequence[BlockState], where: Where
    ) -> Refused | None:
        """Why a scope whose blocks go from blocks to the states after breaks the block limit
        or the character budget (the rule of `Limits`, which the store holds too), or None."""
        count, chars = len(blocks), sum(len(b.content) for b in blocks)
        new_count, new_chars = len(after), sum(len(state.content) for state in after)
        if not self.limits.blocks_hold(count, new_count):
            return refusal(Rule.TOO_MANY, where, count=new_count, limit=self.limits.max_blocks)
        if not self.limits.chars_hold(chars, new_chars):
            return self.over_budget(new_chars, where)
        return None

    def over_budget(self, total: int, where: Where = DM) -> Refused:
        """The refusal for a change that would bring a scope to total characters."""
        budget = self.limits.max_total_chars
        return refusal(Rule.OVER_BUDGET, where, total=total, budget=budget)

    def too_many(self, where: Where = DM) -> Refused:
        """The refusal for a change that would bring a scope past its block limit (as the
        store found it, atomically: one more than the limit)."""
        limit = self.limits.max_blocks
        return refusal(Rule.TOO_MANY, where, count=limit + 1, limit=limit)

    # --- sensitive is never lowered but by a person -------------------------------------------

    @staticmethod
    def sensitive_history_wanted(change: BlockChange) -> list[str]:
        """The labels of change whose last state (of a removed block: in its kept versions)
        decides whether they stay sensitive: plain states brought to an absent label by the
        model, an undo or a restore."""
        if change.by.channel not in _KEEPS_SENSITIVE:
            return []
        return [
            want.label
            for want in change.wanted
            if want.state is not None
            and not want.state.sensitive
            and change.seen.get(label_key(want.label)) is None
        ]

    @staticmethod
    def kept_sensitive(
        change: BlockChange, last: Mapping[str, BlockState | None] | None = None
    ) -> BlockChange:
        """change with each state it stores made sensitive where it must be (the rest of the
        review then meets the change as it will be stored):

        - content holding `||marks||` is stored sensitive, whoever writes it, however;
        - the model (its tools, its proposals), an undo and a restore never make a sensitive
          label plain: not of a block that is sensitive now, nor of a removed one whose last
          state (last, by label key, read from its kept versions) was sensitive, so the
          model's delete and re-create, or a restore of a version from before the block was
          made sensitive, keep it sensitive. One exception: an undo that keeps the content
          as it is now (the undo of `/pin sensitive <label> on`) is what `/pin sensitive
          <label> off` does, and may be made by whoever may make that.

        A removal of the model's to make the block plain is closed by this; an edit of the
        model's that asks for plain is refused (Rule.LOWERED)."""
        channel = change.by.channel
        last = last or {}
        wanted: list[Wanted] = []
        raised = False
        for want in change.wanted:
            state = want.state
            if state is not None and not state.sensitive:
                key = label_key(want.label)
                seen = change.seen.get(key)
                before: Block | BlockState | None = last.get(key) if seen is None else seen.block
                keeps = (
                    channel in _KEEPS_SENSITIVE
                    and before is not None
                    and before.sensitive
                    and not (
                        channel is Channel.UNDO
                        and seen is not None
                        and state.content == before.content
                    )
                    and not (channel is Channel.TOOL and seen is not None)  # Rule.LOWERED
                )
                if keeps or has_marks(state.content):
                    state, raised = dataclasses.replace(state, sensitive=True), True
                    want = dataclasses.replace(want, state=state)
            wanted.append(want)
        return dataclasses.replace(change, wanted=tuple(wanted)) if raised else change

    # --- the one review of a change -------------------------------------------------------------

    async def review(
        self,
        change: BlockChange,
        where: Where,
        *,
        speaker: Speaker | None,
        blocks: Sequence[Block] | None = None,
    ) -> Refused | None:
        """Whether change may be made, now, by speaker (None: an operator's import, or a
        proposal not yet decided, whose approver is checked when approving) to a scope whose
        blocks are blocks (None: not read, as for one add; the labels the change saw are its
        blocks then, and the store holds the limits): the first refusal, or None.

        Every label the change brings into being meets the label rules; every new content the
        content and credential rules; every new priority the priority rule and new keywords the
        keyword rules; shared blocks need a shared admin, and making or changing a strong
        personal block strong rights; the
        model may not change or remove a pinned block; the scope may not grow past its block
        limit or budget. Versions an import brings meet the same label, content and credential
        rules, and their free text the text rule."""
        if where.shared and (problem := await self._permission(speaker, Action.SHARED_WRITE)):
            return problem
        if blocks is None:
            current = {key: seen.block for key, seen in change.seen.items() if seen is not None}
        else:
            current = {label_key(block.label): block for block in blocks}
        after: dict[str, BlockState | None] = {}
        strong = False
        for want in change.wanted:
            key = label_key(want.label)
            before = current.get(key)
            after[key] = want.state
            if before is not None and want.state == BlockState.of(before):
                continue
            if problem := self._label_problem(change, want.label, before, want.state, where):
                return problem
            strong = strong or (
                want.state is not None
                and (
                    want.state.level is Level.STRONG
                    or (before is not None and before.level is Level.STRONG)
                )
            )
        if (
            strong
            and not where.shared
            and (problem := await self._permission(speaker, Action.PERSONAL_STRONG))
        ):
            return problem
        if change.history is not None and (problem := self._history_problem(change, where)):
            return problem
        if blocks is None:
            return None
        kept = [BlockState.of(b) for k, b in current.items() if k not in after]
        states = [*kept, *(state for state in after.values() if state is not None)]
        return self.limits_problem(blocks, states, where)

    @staticmethod
    async def _permission(speaker: Speaker | None, action: Action) -> Refused | None:
        """Why speaker may not do action (nobody to ask: an operator's import, or a proposal
        whose approver is asked when approving), or None."""
        reason = await speaker.refusal_for(action) if speaker is not None else None
        return refusal(Rule.NOT_ALLOWED, reason=reason) if reason else None

    def _history_problem(self, change: BlockChange, where: Where) -> Refused | None:
        """The first rule a version an import brings breaks, or None."""
        for version in change.history or ():
            if problem := (
                self._version_problem(version.label, version.before, version.actor, where)
                or text_problem(version.detail, "detail", MAX_RECORDED_CHARS)
                or text_problem(version.op, "operation id", MAX_RECORDED_CHARS)
            ):
                return problem
        return None

    def _label_problem(
        self,
        change: BlockChange,
        label: str,
        before: Block | None,
        state: BlockState | None,
        where: Where,
    ) -> Refused | None:
        """The first rule one label's change breaks, or None."""
        if (
            change.by.channel is Channel.TOOL
            and before
            and (problem := self._lowered(before, state, where))
        ):
            return problem
        if change.by.channel is Channel.TOOL and before and before.state is State.PINNED:
            return refusal(Rule.PINNED, where, label=before.label)
        if (
            change.by.channel in _MODEL_CHANNELS
            and before is not None
            and before.sensitive
            and state is not None
            and state.content != before.content
            and has_placeholder(state.content)
        ):
            return refusal(Rule.MASKED, where, label=before.label)
        if state is None:
            return None
        if before is None:
            return self.state_problem(label, state, group=where.group)
        if state.content != before.content and (
            problem := self.content_problem(state.content)
            or self.secret_problem(f"{label} {state.content}", group=where.group)
        ):
            return problem
        if state.triggers != before.triggers and (
            problem := self.triggers_problem(state.triggers)
            or self.secret_problem(_secret_text(label, state), group=where.group)
        ):
            return problem
        return priority_problem(state.priority) if state.priority != before.priority else None

    @staticmethod
    def _lowered(before: Block, state: BlockState | None, where: Where) -> Refused | None:
        """Why the model may not make this change to before: it would take back pinned or
        sensitive (a removal of a pinned block is the pinned rule's), or None."""
        if state is None:
            return None
        if before.sensitive and not state.sensitive:
            command = f"{where.pin} sensitive {before.label} off"
            flag = "sensitive"
        elif before.state is State.PINNED and state.state is not State.PINNED:
            command, flag = f"{where.pin} unpin {before.label}", "pinned"
        else:
            return None
        return refusal(Rule.LOWERED, where, label=before.label, flag=flag, command=command)

    def _version_problem(
        self, label: str, state: BlockState | None, actor: str, where: Where
    ) -> Refused | None:
        """The first rule a kept version (of an import) breaks, or None."""
        if problem := self.label_problem(label) or text_problem(actor, "actor", MAX_RECORDED_CHARS):
            return problem
        if state is None:
            return None
        return self.state_problem(label, state, group=where.group, new_label=False)

    # --- idle retention -----------------------------------------------------------------------

    def expired(self, block: Block, now: datetime, calls_before: int) -> bool:
        """Whether an idle block is due for deletion at a model request: idle for
        idle_retention_days and idle_retention_calls further calls, or idle_hard_retention_days.
        Active and pinned blocks never are."""
        if block.state is not State.IDLE or block.idle_since is None:
            return False
        idle_for = now - block.idle_since
        if idle_for >= timedelta(days=self.pins.idle_hard_retention_days):
            return True
        further_calls = calls_before - (block.idle_calls or 0)
        return (
            idle_for >= timedelta(days=self.pins.idle_retention_days)
            and further_calls >= self.pins.idle_retention_calls
        )

    def idle_due(self, block: Block, calls: int, now: datetime) -> str:
        """When an idle block becomes due for clean-up, in words."""
        pins = self.pins
        idle_for = now - (block.idle_since or now)

        def days_left(limit: int) -> int:
            return max(0, math.ceil((timedelta(days=limit) - idle_for) / _DAY))

        days, hard = days_left(pins.idle_retention_days), days_left(pins.idle_hard_retention_days)
        calls_left = max(0, pins.idle_retention_calls - (calls - (block.idle_calls or 0)))
        if hard == 0 or (days == 0 and calls_left == 0):
            return "due: deleted at the next model request here"
        return (
            f"deleted once {_plural(days, 'more day')} and "
            f"{_plural(calls_left, 'more model call')} have passed, or in "
            f"{_plural(hard, 'day')} at the latest"
        )

    def idle_notice(self) -> str:
        """What going idle means for a block, in words."""
        pins = self.pins
        return (
            "it is no longer sent to the model, and it is deleted after "
            f"{pins.idle_retention_days} idle days and {pins.idle_retention_calls} further "
            f"model calls, or after {pins.idle_hard_retention_days} idle days"
        )

    # --- the token warning ----------------------------------------------------------------------

    def token_warning(self, total: int) -> str | None:
        """The warning for blocks that add total tokens to every request, or None."""
        threshold = self.pins.token_warning_threshold
        if not threshold or total <= threshold:
            return None
        return (
            f"Warning: that is over the warning threshold of {threshold:,} tokens; "
            "consider shortening, idling or removing blocks."
        )
