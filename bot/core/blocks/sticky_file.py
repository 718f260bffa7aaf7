"""A Sticky Context file (`sticky-context.json`, version 1 or 2) brought into one scope: each slot
becomes a block as `/pin add` would make it (the same label, content, priority and credential
rules, the scope's block limit and budget), with its priority, pinned, sensitive (version 2)
and times; every refused slot is named with its rule, and then nothing is written."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.core.blocks.ops import BlockOps, where_of
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
    ABSENT,
    Block,
    BlockChange,
    BlockState,
    ChangeKind,
    Level,
    Seen,
    State,
    Wanted,
    label_key,
)

VERSIONS = (1, 2)
_TOP_KEYS = {"version", "slots"}
_SLOT_KEYS = {1: {"content", "priority", "pinned", "created", "updated"}}
_SLOT_KEYS[2] = {*_SLOT_KEYS[1], "sensitive"}


def is_sticky_file(document: Any) -> bool:
    """Whether a document is a Sticky Context file rather than a pinbot export: an object
    with "slots" and no "scopes"."""
    return isinstance(document, dict) and "slots" in document and "scopes" not in document


@dataclass
class StickyPlan:
    """What importing a Sticky Context file into scope would add (the blocks, in the file's
    order) and the problems that stop it."""

    scope: str
    wanted: list[Wanted] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def change(self) -> BlockChange:
        """The change adding every slot: each a new label (one taken since is refused)."""
        seen: dict[str, Seen | None] = {label_key(w.label): ABSENT for w in self.wanted}
        return BlockChange(
            self.scope,
            tuple(self.wanted),
            IMPORT,
            seen,
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
    return Wanted(key, block, created, updated)


def plan_sticky(
    document: Any, scope_key: str, level: Level | None, policy: BlockPolicy, now: datetime
) -> StickyPlan:
    """Check a Sticky Context file for import into scope_key (at level, or the level `/pin add`
    would choose there); every problem is listed. The scope's own blocks count when the plan
    is applied (`apply_sticky`)."""
    scope = read_scope(scope_key, agent_prefix=True)
    plan = StickyPlan(scope.key if scope else scope_key)
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


def _limit_problems(
    plan: StickyPlan, current: list[Block], policy: BlockPolicy, where: Where
) -> list[str]:
    """Each slot that, added after the ones before it as `/pin add` would, finds its label
    taken or breaks the block limit or the budget."""
    problems = []
    taken = {label_key(b.label): b.label for b in current}
    blocks = [BlockState.of(b) for b in current]
    for wanted in plan.wanted:
        assert wanted.state is not None
        if label_key(wanted.label) in taken:
            label = taken[label_key(wanted.label)]
            problem: Refused | None = refusal(Rule.LABEL_TAKEN, where, label=label)
        else:
            problem = policy.limits_problem(current, [*blocks, wanted.state], where)
        if problem is None:
            blocks.append(wanted.state)
            continue
        problems.append(_refused(wanted.label, problem))
    return problems


async def apply_sticky(ops: BlockOps, plan: StickyPlan, *, dry_run: bool = False) -> int:
    """Add a checked plan's slots to its scope in one transaction, reviewed by the block policy
    like any change: how many were added; or 0 with plan.problems saying why (nothing is
    written). A dry run checks everything and writes nothing."""
    where = where_of(plan.scope)
    current, _ = await ops.scope_now(plan.scope)
    plan.problems += _limit_problems(plan, current, ops.policy, where)
    if plan.problems:
        return 0
    try:
        done = await ops.commit_all([plan.change()], {plan.scope: current}, dry_run=dry_run)
    except (Conflict, LabelTaken, LimitReached, OverBudget):
        plan.problems.append("the blocks changed while importing; run the import again")
        return 0
    if isinstance(done, dict):
        plan.problems += [problem.reason for problem in done.values()]
        return 0
    return len(plan.wanted)
