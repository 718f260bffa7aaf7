"""A Sticky Context file (`sticky-context.json`, version 1 or 2) brought into one scope: a slot
whose key is new becomes a block as `/pin add` would make it (the same label, content, priority
and credential rules, the scope's block limit and budget), with its priority, pinned, sensitive
(version 2) and times; a slot whose key the scope holds updates that block where the file
differs from it, as `sticky_set` would, and one that does not differ is left alone. Every
refused slot is named with its rule, and then nothing is written."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.core.blocks.ops import BlockOps, seen_of, where_of
from bot.core.blocks.review import BlockPolicy, Refused, Rule, Where, default_level, refusal
from bot.core.blocks.transfer import (
    IMPORT,
    SCOPE_EXAMPLES,
    SCOPE_RULES,
    bad_text,
    parse_time,
    unknown_keys,
)
from bot.core.people import is_shared_scope, read_scope
from bot.secrets import redact
from storage.errors import Conflict, LabelTaken, LimitReached, OverBudget
from storage.models import (
    Block,
    BlockChange,
    BlockState,
    ChangeKind,
    Level,
    State,
    Wanted,
    label_key,
)

VERSIONS = (1, 2)
_TOP_KEYS = {"version", "slots"}
_SLOT_KEYS = {1: {"content", "priority", "pinned", "created", "updated"}}
_SLOT_KEYS[2] = {*_SLOT_KEYS[1], "sensitive"}
# A slot's fields that, left out, leave a block it updates as it is (content is required).
_KEPT = frozenset({"priority", "pinned", "sensitive"})


def is_sticky_file(document: Any) -> bool:
    """Whether a document is a Sticky Context file rather than a pinbot export: an object
    with "slots" and no "scopes"."""
    return isinstance(document, dict) and "slots" in document and "scopes" not in document


@dataclass
class StickyPlan:
    """What importing a Sticky Context file into scope asks for: each slot as the new block it
    would be (wanted, in the file's order), the fields each slot gives of those a block it
    updates keeps when they are left out (given, by label key), whether --level was given, and
    the problems that stop it. Once applied: the labels it added and changed, and the change."""

    scope: str
    wanted: list[Wanted] = field(default_factory=list)
    given: dict[str, frozenset[str]] = field(default_factory=dict)
    level_given: bool = False
    problems: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def change(
        self, wanted: list[Wanted], current: list[Block], marks: dict[str, str]
    ) -> BlockChange:
        """The change bringing the scope's labels to wanted, reviewed against the scope's
        blocks and marks as read (a label taken or changed since refuses it)."""
        return BlockChange(
            self.scope,
            tuple(wanted),
            IMPORT,
            seen_of(current, marks, [w.label for w in wanted]),
            is_shared_scope(self.scope),
            ChangeKind.IMPORT,
            mask=redact,
        )


def _refused(key: str, problem: Refused) -> str:
    code = f" ({problem.code.value})" if problem.code else ""
    return f"slot '{key}' refused{code}: {problem.reason}"


def _slot(
    key: str, item: Any, version: int, level: Level, plan: StickyPlan, now: datetime
) -> Wanted | None:
    """One slot as the block it becomes, or None (its problems added to plan)."""
    here = f"slot '{key}'"
    if not isinstance(item, dict):
        plan.problems.append(f"{here}: must be an object with content")
        return None
    before = len(plan.problems)
    unknown_keys(item, _SLOT_KEYS[version], here, plan.problems)
    content, priority = item.get("content"), item.get("priority", 0)
    pinned, sensitive = item.get("pinned", False), item.get("sensitive", False)
    if not isinstance(content, str):
        plan.problems.append(f"{here}: content must be a string")
    if not isinstance(priority, int) or isinstance(priority, bool):
        plan.problems.append(f"{here}: priority must be a whole number")
    for name, value in (("pinned", pinned), ("sensitive", sensitive)):
        if not isinstance(value, bool):
            plan.problems.append(f"{here}: {name} must be true or false")
    created = (
        parse_time(item["created"], here, "created", plan.problems) if "created" in item else now
    )
    updated = (
        parse_time(item["updated"], here, "updated", plan.problems)
        if "updated" in item
        else created
    )
    if created is not None and updated is not None:
        if "created" in item and "updated" in item and updated < created:
            plan.problems.append(
                f"{here}: updated is before created; a slot changes after it is made"
            )
        for name in ("created", "updated"):
            moment = created if name == "created" else updated
            if name in item and moment > now:
                plan.problems.append(
                    f"{here}: {name} is in the future (now is {now.isoformat()}); "
                    "fix the time or leave it out"
                )
    if len(plan.problems) > before or created is None or updated is None:
        return None
    state = State.PINNED if pinned else State.ACTIVE
    block = BlockState(str(content).strip(), level, state, int(priority), bool(sensitive))
    plan.given[label_key(key)] = frozenset(_KEPT & item.keys())
    return Wanted(key, block, created, updated)


def plan_sticky(
    document: Any, scope_key: str, level: Level | None, policy: BlockPolicy, now: datetime
) -> StickyPlan:
    """Check a Sticky Context file for import into scope_key (at level, or the level `/pin add`
    would choose there); every problem is listed. The scope's own blocks count when the plan
    is applied (`apply_sticky`)."""
    scope = read_scope(scope_key, agent_prefix=True)
    plan = StickyPlan(scope.key if scope else scope_key, level_given=level is not None)
    if scope is None or bad_text(scope_key):
        plan.problems.append(
            f"--scope {scope_key!r}: not a scope key the bot reads ({SCOPE_RULES}; "
            f"{SCOPE_EXAMPLES})"
        )
        return plan
    version = document.get("version")
    if version not in VERSIONS or isinstance(version, bool):
        plan.problems.append(
            f"unsupported Sticky Context version {version!r}; this pinbot reads versions 1 and 2"
        )
        return plan
    unknown_keys(document, _TOP_KEYS, "top level", plan.problems)
    slots = document.get("slots")
    if not isinstance(slots, dict):
        plan.problems.append('"slots" must be an object of slots by key')
        return plan
    where = where_of(plan.scope)
    limit = policy.limits.max_blocks
    if len(slots) > limit:
        # Refused before any slot is read: however many are refused, too many would remain.
        plan.problems.append(
            f"the file has {len(slots):,} slots: "
            + refusal(Rule.TOO_MANY, where, count=len(slots), limit=limit).reason
        )
        return plan
    level = level or default_level(where.group)
    keys: set[str] = set()  # each slot's label_key: two slots with the same one are duplicates
    for key, item in slots.items():
        wanted = _slot(str(key), item, version, level, plan, now)
        if wanted is None or wanted.state is None:
            continue
        if problem := policy.state_problem(wanted.label, wanted.state, group=where.group):
            plan.problems.append(_refused(wanted.label, problem))
            continue
        if (folded := label_key(wanted.label)) in keys:
            plan.problems.append(
                f"slot '{wanted.label}': another slot has the same key ignoring case"
            )
            continue
        keys.add(folded)
        plan.wanted.append(wanted)
    return plan


def _updated(wanted: Wanted, block: Block, given: frozenset[str], level_given: bool) -> BlockState:
    """The state a slot brings a block of its key to, as `sticky_set` would: the slot's content;
    its priority, pinned and sensitive where it gives them (pinned false unpins a pinned block
    and leaves an idle one idle), else the block's; the level of --level, else the block's; the
    block's keywords and end, which the format has not."""
    slot = wanted.state
    assert slot is not None
    state = block.state
    if "pinned" in given:
        unpinned = State.ACTIVE if block.state is State.PINNED else block.state
        state = State.PINNED if slot.state is State.PINNED else unpinned
    return BlockState(
        slot.content,
        slot.level if level_given else block.level,
        state,
        slot.priority if "priority" in given else block.priority,
        slot.sensitive if "sensitive" in given else block.sensitive,
        block.triggers,
        block.ends_at,
    )


def _wanted(
    plan: StickyPlan, current: list[Block], policy: BlockPolicy, where: Where
) -> list[Wanted]:
    """The labels the plan changes, in the file's order: each slot whose key is new, and each
    whose block it would change (a slot as its block is needs no change). A slot that, after
    the ones before it, would break the block limit or the budget (counted as `/pin add` and
    `/pin edit` count them, from the scope as it is) adds its problem to the plan."""
    blocks = {label_key(b.label): b for b in current}
    sizes = {key: len(b.content) for key, b in blocks.items()}
    count, chars = len(current), sum(sizes.values())
    new_count, new_chars = count, chars
    limits = policy.limits
    changes: list[Wanted] = []
    for wanted in plan.wanted:
        key = label_key(wanted.label)
        block = blocks.get(key)
        if block is None:
            want, added = wanted, True
        else:
            given = plan.given.get(key, frozenset())
            state = _updated(wanted, block, given, plan.level_given)
            if state == BlockState.of(block):
                continue
            want, added = Wanted(block.label, state), False
        assert want.state is not None
        grown_count = new_count + added
        grown_chars = new_chars + len(want.state.content) - sizes.get(key, 0)
        problem: Refused | None = None
        if not limits.blocks_hold(count, grown_count):
            problem = refusal(Rule.TOO_MANY, where, count=grown_count, limit=limits.max_blocks)
        elif not limits.chars_hold(chars, grown_chars):
            problem = policy.over_budget(grown_chars, where)
        if problem is not None:
            plan.problems.append(_refused(wanted.label, problem))
            continue
        new_count, new_chars, sizes[key] = grown_count, grown_chars, len(want.state.content)
        changes.append(want)
        (plan.added if added else plan.changed).append(want.label)
    return changes


async def apply_sticky(ops: BlockOps, plan: StickyPlan, *, dry_run: bool = False) -> int:
    """Bring a checked plan's slots into its scope as one operation in one transaction,
    reviewed by the block policy like any change: a version for each block added or changed
    (one `/pin undo` takes the whole import back), none for a slot as its block is. Returns how
    many blocks were added or changed (plan.added, plan.changed name them; 0 and both empty:
    the scope holds the file already, and nothing is written); or 0 with plan.problems saying
    why nothing was written. A dry run checks everything and writes nothing."""
    where = where_of(plan.scope)
    current, marks = await ops.scope_now(plan.scope)
    wanted = _wanted(plan, current, ops.policy, where)
    if plan.problems or not wanted:
        return 0
    change = plan.change(wanted, current, marks)
    try:
        done = await ops.commit_all([change], {plan.scope: current}, dry_run=dry_run)
    except (Conflict, LabelTaken, LimitReached, OverBudget):  # another writer came between
        plan.problems.append("the blocks changed while importing; run the import again")
        return 0
    if isinstance(done, dict):
        plan.problems += [problem.reason for problem in done.values()]
        return 0
    return len(wanted)
