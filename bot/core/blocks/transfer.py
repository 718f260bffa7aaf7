"""Every block of every scope as human-readable, human-editable JSON, and back: the import checks
everything with /pin's rules and writes all of it in one transaction, or nothing."""

from __future__ import annotations

import dataclasses
import difflib
import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.core.blocks.ops import BlockOps, seen_of, where_of
from bot.core.blocks.review import (
    MAX_RECORDED_CHARS,
    BlockPolicy,
    default_level,
    priority_problem,
    text_problem,
)
from bot.core.blocks.sensitive import shown_content, shown_states
from bot.core.people import is_group_scope, is_shared_scope, read_scope
from bot.secrets import redact
from storage import Store
from storage.blocks import BlockStore
from storage.errors import Conflict, LimitReached, OverBudget
from storage.models import (
    Author,
    Block,
    BlockChange,
    BlockState,
    ChangeKind,
    Channel,
    Level,
    Origin,
    State,
    Version,
    Wanted,
    label_key,
)

FORMAT = "pinbot-blocks"
SCOPE_RULES = (
    "the platform console, feishu or telegram in lower case; Telegram users are positive and "
    "groups negative whole numbers without leading zeros, Feishu chats oc_… and users ou_…"
)
SCOPE_EXAMPLES = "e.g. telegram:direct:42, telegram:group:-100123, telegram:group:-100123::u:42"
VERSION = 1
IMPORT = Author("import", Channel.IMPORT)
_FIELDS = {
    "label",
    "content",
    "level",
    "state",
    "priority",
    "created_at",
    "updated_at",
    "idle_since",
    "idle_calls",
    "sensitive",
    "triggers",
    "ends_at",
}


class _Object(dict[str, Any]):
    """A JSON object as read, with the keys that stood in it more than once."""

    repeated: list[str]


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    found = _Object(pairs)
    found.repeated = []
    if len(found) < len(pairs):  # only then look for the repeated keys
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                found.repeated.append(key)
            seen.add(key)
    return found


def read_document(text: str) -> tuple[Any, list[str]]:
    """An import document from its JSON text, and a problem for every key repeated in one of
    its objects (JSON readers keep the last, silently; an import must not). ValueError when it
    is not JSON, RecursionError when it is nested too deeply."""
    repeating: list[_Object] = []

    def read_object(pairs: list[tuple[str, Any]]) -> _Object:
        found = _object(pairs)
        if found.repeated:
            repeating.append(found)
        return found

    document = json.loads(text, object_pairs_hook=read_object)
    problems: list[str] = []
    if not repeating:  # nothing to name: no walk through the whole document
        return document, problems
    pending: list[tuple[Any, str]] = [(document, "the document")]
    while pending:  # no recursion: depth is whatever the file holds
        value, where = pending.pop()
        if isinstance(value, _Object):
            problems += [
                f"{where}: the key {key!r} appears more than once; keep one of them"
                for key in value.repeated
            ]
            pending += [(item, f"{where} → {key!r}") for key, item in value.items()]
        elif isinstance(value, list):
            pending += [(item, f"{where}[{index}]") for index, item in enumerate(value)]
    return document, sorted(problems)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def block_json(block: Block, *, raw: bool = True) -> dict[str, Any]:
    """One block as it appears in an export; without raw, a sensitive block's content
    redacted."""
    return {
        "label": block.label,
        "content": block.content if raw else shown_content(block),
        "level": block.level.value,
        "state": block.state.value,
        "priority": block.priority,
        "created_at": _time(block.created_at),
        "updated_at": _time(block.updated_at),
        "idle_since": _time(block.idle_since),
        "idle_calls": block.idle_calls,
        "sensitive": block.sensitive,
        "triggers": list(block.triggers),
        "ends_at": _time(block.ends_at),
    }


def version_json(version: Version) -> dict[str, Any]:
    """One kept version as it appears in an export made with history (its state as given:
    shown_history masks the ones a reader may not see)."""
    before = version.before
    return {
        "op": version.op,
        "label": version.label,
        "kind": version.kind.value,
        "detail": version.detail,
        "actor": version.actor,
        "channel": version.channel.value,
        "origin": version.origin.encode() if version.origin else None,
        "at": _time(version.at),
        "before": None
        if before is None
        else {
            "content": before.content,
            "level": before.level.value,
            "state": before.state.value,
            "priority": before.priority,
            "sensitive": before.sensitive,
            "triggers": list(before.triggers),
            "ends_at": _time(before.ends_at),
        },
        "created_at": _time(version.created_at),
        "undone_by": version.undone_by,
    }


def shown_history(blocks: Sequence[Block], kept: Sequence[Version]) -> list[Version]:
    """A scope's kept versions (oldest first) as readers see them: each label's states
    redacted where the label was sensitive then or since, the block now included
    (shown_states)."""
    now = {label_key(b.label): BlockState.of(b) for b in blocks}
    by_label: dict[str, list[int]] = {}
    for index, version in enumerate(kept):
        by_label.setdefault(label_key(version.label), []).append(index)
    found = list(kept)
    for key, indexes in by_label.items():
        newest = indexes[::-1]
        states = shown_states([now.get(key), *(kept[i].before for i in newest)])
        for index, state in zip(newest, states[1:], strict=True):
            found[index] = dataclasses.replace(kept[index], before=state)
    return found


async def export_document(
    store: Store, now: datetime, *, with_history: bool = False, raw: bool = False
) -> dict[str, Any]:
    """The whole store as one JSON-ready document; with_history, each scope's kept versions
    too (an import of it restores them as they are). Sensitive content is redacted unless raw;
    a document where some was says so ("redacted": true), and an import refuses it, since it
    would store the placeholders in place of what they mask."""
    scopes = await store.export_scopes()
    versions = await store.export_versions() if with_history else {}
    document: dict[str, Any] = {}
    redacted = False
    for scope in sorted({*scopes, *versions}):
        calls, blocks = scopes.get(scope, (0, []))
        body: dict[str, Any] = {
            "model_calls": calls,
            "blocks": [block_json(b, raw=raw) for b in blocks],
        }
        redacted = redacted or any(b.sensitive for b in blocks)
        if with_history:
            kept = versions.get(scope, [])
            shown = kept if raw else shown_history(blocks, kept)
            body["history"] = [version_json(v) for v in shown]
            redacted = (
                redacted
                or shown != kept
                or any(v.before is not None and v.before.sensitive for v in kept)
            )
        document[scope] = body
    top = {"format": FORMAT, "version": VERSION, "exported_at": _time(now)}
    return {**top, **({"redacted": True} if redacted and not raw else {}), "scopes": document}


@dataclass
class ImportPlan:
    """What an import would write, the problems that stop it, and a summary of the change."""

    scopes: dict[str, tuple[int, list[Block]]] = field(default_factory=dict)
    history: dict[str, list[Version]] = field(default_factory=dict)  # scopes exported with it
    problems: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)


MAX_COUNT = 2**63 - 1  # SQLite's largest integer
_TOP_KEYS = {"format", "version", "exported_at", "redacted", "scopes"}
_SCOPE_KEYS = {"model_calls", "blocks", "history"}
_VERSION_KEYS = {
    "op",
    "label",
    "kind",
    "detail",
    "actor",
    "channel",
    "origin",
    "at",
    "before",
    "created_at",
    "undone_by",
}


def _count_ok(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def unknown_keys(found: Any, known: set[str], where: str, problems: list[str]) -> None:
    """Every key that is not known, with the closest known key as a hint."""
    for key in sorted(set(found) - known, key=str):
        guess = difflib.get_close_matches(str(key), sorted(known), n=1)
        hint = f" (did you mean '{guess[0]}'?)" if guess else ""
        problems.append(f"{where}: unknown key {str(key)!r}{hint}")


def parse_time(
    value: Any, where: str, name: str, problems: list[str], optional: bool = False
) -> datetime | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        problems.append(
            f"{where}: {name} must be an ISO 8601 time such as 2026-01-01T12:00:00+00:00"
        )
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        problems.append(f"{where}: {name} '{value}' is not an ISO 8601 time")
        return None
    if moment.tzinfo is None:
        problems.append(f"{where}: {name} '{value}' needs a time zone (e.g. +00:00)")
        return None
    try:
        moment.astimezone(UTC).timestamp()
    except (OverflowError, ValueError, OSError):
        problems.append(f"{where}: {name} '{value}' is outside the years pinbot can store")
        return None
    return moment


def _check_text(
    item: dict[str, Any], scope: str, where: str, policy: BlockPolicy, problems: list[str]
) -> None:
    """The label and content rules of /pin, and no credentials in group scopes."""
    label, content = item.get("label"), item.get("content")
    if not isinstance(label, str):
        problems.append(f"{where}: label must be a string")
    elif problem := policy.label_problem(label):
        problems.append(f"{where}: {problem.reason}")
    if not isinstance(content, str):
        problems.append(f"{where}: content must be a string")
    elif content != content.strip():
        problems.append(f"{where}: content must not start or end with spaces or line breaks")
    elif problem := policy.content_problem(content) or policy.secret_problem(
        f"{label} {content}", group=is_group_scope(scope)
    ):
        problems.append(f"{where}: {problem.reason}")


def _one_of(values: type[Level] | type[State]) -> str:
    names = [f"'{value.value}'" for value in values]
    return f"{', '.join(names[:-1])} or {names[-1]}"


def _check_kinds(level: Any, state: Any, priority: Any, where: str, problems: list[str]) -> None:
    if not isinstance(level, str) or level not in set(Level):
        problems.append(f"{where}: level must be {_one_of(Level)}")
    if not isinstance(state, str) or state not in set(State):
        problems.append(f"{where}: state must be {_one_of(State)}")
    if not isinstance(priority, int) or isinstance(priority, bool):
        problems.append(f"{where}: priority must be a whole number")
    elif problem := priority_problem(priority):
        problems.append(f"{where}: {problem.reason}")


def _parse_block(
    item: Any, scope: str, index: int, policy: BlockPolicy, problems: list[str], now: datetime
) -> Block | None:
    """One block of an import; only label and content are required. The level defaults as
    `/pin add` would choose it (strong in a DM scope, context in a group scope), the state to
    active, the priority to 0 and the times to now."""
    where = f"scope '{scope}', block #{index + 1}"
    if not isinstance(item, dict):
        problems.append(f"{where}: must be an object with at least label and content")
        return None
    label, content = item.get("label"), item.get("content")
    if isinstance(label, str):
        where = f"scope '{scope}', block '{label}'"
    before = len(problems)
    unknown_keys(item, _FIELDS, where, problems)
    _check_text(item, scope, where, policy, problems)
    level = item.get("level", default_level(is_group_scope(scope)).value)
    state = item.get("state", State.ACTIVE.value)
    priority = item.get("priority", 0)
    _check_kinds(level, state, priority, where, problems)
    created = (
        parse_time(item["created_at"], where, "created_at", problems)
        if "created_at" in item
        else now
    )
    updated = (
        parse_time(item["updated_at"], where, "updated_at", problems)
        if "updated_at" in item
        else created
    )
    idle_since = parse_time(item.get("idle_since"), where, "idle_since", problems, True)
    idle_calls = item.get("idle_calls")
    if idle_calls is not None and not _count_ok(idle_calls):
        problems.append(
            f"{where}: idle_calls must be a whole number from 0 to {MAX_COUNT:,}, or null"
        )
    if state == State.IDLE and idle_since is None and len(problems) == before:
        problems.append(f"{where}: an idle block needs idle_since")
    sensitive = item.get("sensitive", False)
    if not isinstance(sensitive, bool):
        problems.append(f"{where}: sensitive must be true or false")
    triggers = _triggers(item.get("triggers"), where, "triggers", policy, problems)
    # An end that has passed is kept: the block has ended (a person cannot give one, but a
    # file carries what was).
    ends_at = parse_time(item.get("ends_at"), where, "ends_at", problems, True)
    if len(problems) > before or created is None or updated is None:
        return None
    return Block(
        id=0,
        scope=scope,
        label=str(label),
        content=str(content),
        level=Level(str(level)),
        state=State(state),
        priority=int(priority),
        created_at=created,
        updated_at=updated,
        idle_since=idle_since if state == State.IDLE else None,
        idle_calls=(idle_calls or 0) if state == State.IDLE else None,
        sensitive=sensitive is True,
        triggers=triggers or (),
        ends_at=ends_at,
    )


def _triggers(
    value: Any, where: str, name: str, policy: BlockPolicy, problems: list[str]
) -> tuple[str, ...] | None:
    """A block's keywords as a file gives them: a list of strings (absent or null: none, as in
    the files of releases before keywords), by the keyword rules of the review; None when they
    cannot be read (the problem is listed)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        problems.append(f"{where}: {name} must be a list of keywords (strings), or []")
        return None
    if problem := policy.triggers_problem(value):
        problems.append(f"{where}: {problem.reason}")
        return None
    return tuple(value)


def _check_scope(scope: str, blocks: list[Block], policy: BlockPolicy, problems: list[str]) -> None:
    seen: set[str] = set()
    for block in blocks:
        if label_key(block.label) in seen:
            problems.append(
                f"scope '{scope}': the label '{block.label}' appears twice "
                "(labels are matched ignoring case)"
            )
        seen.add(label_key(block.label))
    where = where_of(scope)
    if problem := policy.limits_problem([], [BlockState.of(b) for b in blocks], where):
        problems.append(f"scope '{scope}': {problem.reason}")


def plan_import(document: Any, policy: BlockPolicy, now: datetime) -> ImportPlan:
    """Check a whole import document; every problem found is listed, none stops the search.

    The smallest document is `{"scopes": {"telegram:direct:42": {"blocks": [{"label": "tone",
    "content": "Be brief."}]}}}`: `format` and `version` are optional, but must match when given.
    """
    plan = ImportPlan()
    if not isinstance(document, dict):
        plan.problems.append('not a pinbot export: the top level must be an object with "scopes"')
        return plan
    if document.get("format", FORMAT) != FORMAT:
        plan.problems.append(f'not a pinbot export: "format" must be "{FORMAT}" when given')
        return plan
    if document.get("version", VERSION) != VERSION:
        plan.problems.append(
            f"unsupported version {document.get('version')!r}; this pinbot reads version {VERSION}"
        )
        return plan
    if document.get("redacted", False) is not False:
        plan.problems.append(
            "this export was made without --raw: the content of its sensitive blocks is masked, "
            "and importing it would store the placeholders; export again with pinbot export --raw"
        )
        return plan
    unknown_keys(document, _TOP_KEYS, "top level", plan.problems)
    scopes = document.get("scopes")
    if not isinstance(scopes, dict):
        plan.problems.append('"scopes" must be an object of scope keys')
        return plan
    written_as: dict[str, str] = {}
    for written, body in scopes.items():
        # Only a key exactly as the bot writes it (a leading agent:<name>: dropped, as configs
        # write it): blocks under any other key would be in no request, and no page's.
        parsed_scope = read_scope(written, agent_prefix=True)
        if parsed_scope is None or bad_text(written):
            plan.problems.append(
                f"scope {written!r}: not a scope key the bot reads ({SCOPE_RULES}; "
                f"{SCOPE_EXAMPLES})"
            )
            continue
        scope = parsed_scope.key
        if scope in written_as:
            plan.problems.append(
                f"scope {written!r}: names the same scope as {written_as[scope]!r}; "
                "keep one of them"
            )
            continue
        written_as[scope] = written
        parsed = _parse_scope_body(body, scope, policy, plan.problems, now)
        if parsed is not None:
            plan.scopes[scope] = parsed
        if isinstance(body, dict) and "history" in body:
            plan.history[scope] = _parse_history(body["history"], scope, policy, plan.problems)
    return plan


def _parse_history(
    items: Any, scope: str, policy: BlockPolicy, problems: list[str]
) -> list[Version]:
    """The kept versions of an export made with history, checked field by field and by the
    rules a block change meets (labels, content, credentials in group scopes, plain text)."""
    if not isinstance(items, list):
        problems.append(f"scope '{scope}': history must be a list")
        return []
    versions: list[Version] = []
    keys: set[tuple[str, str]] = set()  # (operation, label_key) of each version kept
    for index, item in enumerate(items):
        where = f"scope '{scope}', history #{index + 1}"
        before = len(problems)
        if not isinstance(item, dict):
            problems.append(f"{where}: must be an object")
            continue
        unknown_keys(item, _VERSION_KEYS, where, problems)
        text = {name: item.get(name) for name in ("op", "label", "actor", "detail")}
        if not all(isinstance(value, str) for value in text.values()):
            problems.append(f"{where}: op, label, actor and detail must be strings")
        kind, channel = item.get("kind"), item.get("channel")
        _check_recorded(item, where, problems)
        at = parse_time(item.get("at"), where, "at", problems)
        created = parse_time(item.get("created_at"), where, "created_at", problems, True)
        state = _parse_state(item.get("before"), where, policy, problems)
        if len(problems) > before or at is None:
            continue
        if found := _version_problem(text, state, scope, policy):
            problems.append(f"{where}: {found}")
            continue
        key = (str(text["op"]), label_key(str(text["label"])))
        if key in keys:
            problems.append(
                f"{where}: operation {key[0]!r} already has a version of '{text['label']}' "
                "(labels are matched ignoring case and width); keep one of them"
            )
            continue
        keys.add(key)
        versions.append(
            Version(
                *(0, str(text["op"]), scope, str(text["label"]), ChangeKind(str(kind))),
                *(str(text["detail"]), str(text["actor"]), Channel(str(channel)), at, state),
                *(created, _origin(item["origin"]) if item.get("origin") else None),
                *(item.get("undone_by"),),
            )
        )
    return versions


def _check_recorded(item: dict[str, Any], where: str, problems: list[str]) -> None:
    """A version's kind, channel, origin and undone_by: known values and plain text."""
    kind, channel = item.get("kind"), item.get("channel")
    if not isinstance(kind, str) or kind not in set(ChangeKind):
        problems.append(f"{where}: kind must be one of {', '.join(ChangeKind)}")
    if not isinstance(channel, str) or channel not in set(Channel):
        problems.append(f"{where}: channel must be one of {', '.join(Channel)}")
    for name in ("origin", "undone_by"):
        value = item.get(name)
        if value is not None and not isinstance(value, str):
            problems.append(f"{where}: {name} must be a string or null")
        elif value is not None and (problem := text_problem(value, name, MAX_RECORDED_CHARS)):
            problems.append(f"{where}: {problem.reason}")
    if isinstance(item.get("origin"), str) and _origin(item["origin"]) is None:
        problems.append(
            f"{where}: origin must be message:<id>:<author> or proposal:<number>, or null"
        )


def _version_problem(
    text: dict[str, Any], state: BlockState | None, scope: str, policy: BlockPolicy
) -> str | None:
    """The first rule a version breaks: its label's, its free text's, its content's."""
    group = is_group_scope(scope)
    problem = (
        policy.label_problem(text["label"])
        or text_problem(text["actor"], "actor", MAX_RECORDED_CHARS)
        or text_problem(text["detail"], "detail", MAX_RECORDED_CHARS)
        or text_problem(text["op"], "operation id", MAX_RECORDED_CHARS)
        # A group's members read a version's actor and detail in /pin shared history.
        or policy.secret_problem(f"{text['actor']} {text['detail']}", group=group)
    )
    if problem is None and state is not None:
        problem = policy.state_problem(text["label"], state, group=group, new_label=False)
    return None if problem is None else problem.reason


def _origin(text: str) -> Origin | None:
    """An origin as an export writes it, or None when it is not one."""
    try:
        return Origin.decode(text)
    except ValueError:
        return None


def _parse_state(
    item: Any, where: str, policy: BlockPolicy, problems: list[str]
) -> BlockState | None:
    """A version's state before its change (None: the block did not exist); keywords and an
    end absent, as in the files of releases before them, are none."""
    if item is None:
        return None
    if not isinstance(item, dict) or not isinstance(item.get("content"), str):
        problems.append(f"{where}: before must be null or an object with content")
        return None
    level, state, priority = item.get("level"), item.get("state"), item.get("priority", 0)
    _check_kinds(level, state, priority, where, problems)
    sensitive = item.get("sensitive", False)
    if not isinstance(sensitive, bool):
        problems.append(f"{where}: before.sensitive must be true or false")
        return None
    triggers = _triggers(item.get("triggers"), where, "before.triggers", policy, problems)
    ends_at = parse_time(item.get("ends_at"), where, "before.ends_at", problems, True)
    if not isinstance(level, str) or level not in set(Level) or state not in set(State):
        return None
    if triggers is None or (item.get("ends_at") is not None and ends_at is None):
        return None
    return BlockState(
        *(item["content"], Level(level), State(str(state)), int(priority), sensitive),
        *(triggers, ends_at),
    )


def bad_text(text: str) -> bool:
    """Whether text holds characters no key can: lone surrogates or control characters."""
    return any(unicodedata.category(char) in ("Cs", "Cc") for char in text)


def _parse_scope_body(
    body: Any, scope: str, policy: BlockPolicy, problems: list[str], now: datetime
) -> tuple[int, list[Block]] | None:
    where = f"scope '{scope}'"
    if not isinstance(body, dict):
        problems.append(f'{where}: must be an object with a "blocks" list')
        return None
    unknown_keys(body, _SCOPE_KEYS, where, problems)
    if not isinstance(body.get("blocks"), list):
        # A missing or misspelled "blocks" must never import a scope as empty.
        problems.append(f'{where}: needs a "blocks" list (use [] to empty the scope)')
        return None
    calls = body.get("model_calls", 0)
    if not _count_ok(calls):
        problems.append(f"{where}: model_calls must be a whole number from 0 to {MAX_COUNT:,}")
        calls = 0
    parsed = [
        _parse_block(item, scope, i, policy, problems, now) for i, item in enumerate(body["blocks"])
    ]
    blocks = [b for b in parsed if b is not None]
    _check_scope(scope, blocks, policy, problems)
    return calls, blocks


def import_change(
    scope: str,
    calls: int,
    blocks: Sequence[Block],
    now: tuple[Sequence[Block], dict[str, str]],
    history: Sequence[Version] | None,
    *,
    audited: bool,
    by: Author = IMPORT,
) -> BlockChange:
    """The change that makes scope hold exactly blocks (times, states and all) and this call
    count, reviewed against the scope as it is now (its blocks and marks); with history, the
    scope's kept versions become exactly those."""
    current, marks = now
    wanted = [
        Wanted(b.label, BlockState.of(b), b.created_at, b.updated_at, b.idle_since, b.idle_calls)
        for b in blocks
    ]
    imported = {label_key(b.label) for b in blocks}
    wanted += [Wanted(b.label, None) for b in current if label_key(b.label) not in imported]
    return BlockChange(
        scope,
        tuple(wanted),
        by,
        seen_of(current, marks, [w.label for w in wanted]),
        audited,
        ChangeKind.IMPORT,
        calls=calls,
        history=None if history is None else tuple(history),
        mask=redact,
    )


async def apply_import(ops: BlockOps, plan: ImportPlan) -> int:
    """Write a checked plan as one operation in one transaction, each scope's part reviewed
    by the block policy like any change (changes to shared scopes go to their audit trail;
    scopes exported with history get their versions back as they were, the others a version of
    each block the import changes); returns blocks written. A scope the policy refuses adds
    its problem to plan.problems and nothing is written."""
    changes, current = [], {}
    for scope, (calls, blocks) in plan.scopes.items():
        current[scope], marks = await ops.scope_now(scope)
        history = plan.history.get(scope)
        change = import_change(
            scope, calls, blocks, (current[scope], marks), history, audited=is_shared_scope(scope)
        )
        changes.append(change)
    try:
        # A plan with problems already is reviewed all the same: every problem is listed.
        done = await ops.commit_all(changes, current, dry_run=bool(plan.problems))
    except Conflict:
        plan.problems.append("the blocks changed while importing; run the import again")
        return 0
    except (LimitReached, OverBudget):  # another writer filled a scope meanwhile
        plan.problems.append("a scope's limits changed while importing; run the import again")
        return 0
    if isinstance(done, dict):
        plan.problems += [f"scope '{scope}': {problem.reason}" for scope, problem in done.items()]
    if plan.problems:
        return 0
    return sum(len(blocks) for _, blocks in plan.scopes.values())


async def describe_changes(store: BlockStore, plan: ImportPlan) -> list[str]:
    """Per scope, which labels an import would add, change and remove."""
    current = await store.export_scopes()
    lines = []
    for scope, (_, blocks) in plan.scopes.items():
        before = {label_key(b.label): block_json(b) for b in current.get(scope, (0, []))[1]}
        after = {label_key(b.label): block_json(b) for b in blocks}
        added = sorted(after[k]["label"] for k in after.keys() - before.keys())
        removed = sorted(before[k]["label"] for k in before.keys() - after.keys())
        changed = sorted(
            after[k]["label"] for k in after.keys() & before.keys() if after[k] != before[k]
        )
        if added or removed or changed:
            parts = [
                f"{name} {', '.join(labels)}"
                for name, labels in (("add", added), ("change", changed), ("remove", removed))
                if labels
            ]
            lines.append(f"{scope}: " + "; ".join(parts))
    return lines
