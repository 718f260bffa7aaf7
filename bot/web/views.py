"""What each page shows, read from the store: groups with their block counts, one scope's
blocks with what they cost per request, the audit log, usage per day, and search results. DM
scopes are left out unless the operator opted in (`web.show_direct`)."""

from __future__ import annotations

import difflib
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from urllib.parse import quote

from bot.config import Config
from bot.core.blocks import shown, shown_states
from bot.core.commands import setting_change, setting_value, stored_value
from bot.core.conversation import STRONG_TITLE, estimate
from bot.core.groups import GroupSettings, Name, Places, Source, configured_trigger
from bot.core.people import (
    READ_PLATFORMS,
    ChatKind,
    Conversation,
    ScopeKind,
    after_platform,
    direct_prefix,
    group_children,
    group_prefix,
    members_prefix,
    platform_of,
    read_scope,
    topic_of,
)
from storage import Store
from storage.models import (
    AuditEntry,
    Block,
    BlockState,
    ChangeKind,
    UsageRow,
    UsageTotals,
    Version,
    label_key,
)

PAGE_SIZE = 50
SCAN_BATCH = 500  # scope keys read per query while filling a page
SEARCH_RESULTS = 100
MAX_SEARCH_READ = 64 * SEARCH_RESULTS  # matches read at most to fill one page of results
MAX_MEMBERS = 1_000_000  # members counted per group: all of them
TOP_ROWS = 50  # users and groups listed on the usage page
MIN_SEARCH_CHARS = 2
MAX_PAGE = 100_000
FIRST_YEAR, LAST_YEAR = 1970, 9998  # a day after LAST_YEAR still fits a date
# A history page compares at most this many lines (both sides of every diff, summed), for at
# most this long; older versions are then listed without what changed (issue 36: ndiff over 49
# edits of a 100-line block took 41 s on the one event loop).
DIFF_LINES = 4_000
DIFF_SECONDS = 0.5
DIFF_PAIRS = 40_000  # lines of one version × of the other matched at most (about 200 × 200)


def keywords_text(triggers: Sequence[str]) -> str:
    """A block's keywords as the page shows them and its keywords field holds them: separated
    by commas as `--when` takes them, one with a comma in double quotes ('' for none)."""
    return ", ".join(f'"{keyword}"' if "," in keyword else keyword for keyword in triggers)


def end_text(ends_at: datetime | None) -> str:
    """A block's end as the page's date-time field holds it: UTC, to the minute ('' for
    none)."""
    return "" if ends_at is None else f"{ends_at.astimezone(UTC):%Y-%m-%dT%H:%M}"


def segment(text: str) -> str:
    """text as one URL path segment or query value: every reserved character encoded ('/',
    '?', '#', '%', '&', spaces too), other letters as UTF-8."""
    return quote(text, safe="")


@dataclass
class GroupRow:
    """One group on the overview: its shared blocks and its members' personal blocks."""

    key: str
    shared_blocks: int = 0
    members: int = 0
    member_blocks: int = 0


@dataclass
class GroupsPage:
    """A page of groups and the cursor of the next page, if any."""

    rows: list[GroupRow]
    next_after: str | None


async def platforms(store: Store) -> list[str]:
    """The platforms the bot serves that have blocks, in key order (one query for each
    platform found, and one more)."""
    found: list[str] = []
    after = ""
    while (key := await store.first_scope_after(after)) is not None:
        found.append(platform_of(key))
        after = after_platform(found[-1])
    return [platform for platform in found if platform in READ_PLATFORMS]


async def scopes_read(
    store: Store, prefix: str, *, after: str, limit: int
) -> list[tuple[str, int]]:
    """Like store.scopes_with_prefix, but only the scopes the bot reads (keys.read_scope):
    a key written some other way (by an older import, say) is no page's, and no row's."""
    return [
        (scope, count)
        for scope, count in await store.scopes_with_prefix(prefix, after=after, limit=limit)
        if read_scope(scope) is not None
    ]


async def _shared_count(store: Store, group: str) -> int:
    """How many shared blocks a group has."""
    found = await store.scopes_with_prefix(group, after="", limit=1)
    return found[0][1] if found and found[0][0] == group else 0


async def groups_page(store: Store, after: str = "") -> GroupsPage:
    """Up to PAGE_SIZE groups whose first scope key sorts after the cursor, in key order of
    those first scopes. One query per group shown (its members), besides the walk itself."""
    rows: list[GroupRow] = []
    seen: set[str] = set()
    cursor = after
    for prefix in [group_prefix(platform) for platform in await platforms(store)]:
        while True:  # until the prefix is walked, or the page is full (returned below)
            batch = await store.scopes_with_prefix(prefix, after=cursor, limit=SCAN_BATCH)
            if not batch:
                break
            for scope, count in batch:
                parsed = read_scope(scope)
                group = parsed.group_key if parsed else None
                if group is None or group in seen:
                    cursor = scope
                    continue
                if len(rows) == PAGE_SIZE:
                    return GroupsPage(rows, cursor)
                seen.add(group)
                cursor = scope
                # The walk meets a group's shared scope before its members' scopes: met first
                # through a member, it has no shared blocks, unless that scope was on an
                # earlier page, and the group with it.
                shared = count if scope == group else 0
                if scope != group and group <= after and await _shared_count(store, group):
                    continue
                members = await scopes_read(
                    store, members_prefix(group), after="", limit=MAX_MEMBERS
                )
                if not shared and members and members[0][0] <= after:
                    continue  # shown on an earlier page
                rows.append(GroupRow(group, shared, len(members), sum(n for _, n in members)))
    return GroupsPage(rows, None)


@dataclass
class DirectPage:
    """A page of DM scopes with their block counts, and the cursor of the next page, if any."""

    rows: list[tuple[str, int]]
    next_after: str | None


async def direct_page(store: Store, after: str = "") -> DirectPage:
    """Up to PAGE_SIZE DM scopes after the cursor, in key order, with their block counts."""
    rows: list[tuple[str, int]] = []
    for prefix in [direct_prefix(platform) for platform in await platforms(store)]:
        cursor = after
        while batch := await store.scopes_with_prefix(prefix, after=cursor, limit=SCAN_BATCH):
            for scope, count in batch:
                if read_scope(scope) is None:
                    continue  # no DM the bot reads
                if len(rows) == PAGE_SIZE:
                    return DirectPage(rows, rows[-1][0])
                rows.append((scope, count))
            cursor = batch[-1][0]
    return DirectPage(rows, None)


@dataclass
class ScopeView:
    """One scope's page: a group's shared blocks and its members' blocks, or one DM's blocks,
    with the tokens each adds to a request."""

    key: str
    kind: ScopeKind
    blocks: list[Block]
    tokens: int
    members: list[tuple[str, list[Block], int]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # shared labels with versions, no block


def masked(blocks: Sequence[Block], raw: bool) -> list[Block]:
    """Blocks as the page shows them: sensitive ones redacted, unless the operator opened the
    raw view."""
    return list(blocks) if raw else [shown(block) for block in blocks]


def masked_states(numbered: Numbered, raw: bool) -> list[tuple[BlockState | None, Version | None]]:
    """A history's versions as the page shows them: redacted where the label was sensitive
    then or since (shown_states), unless raw."""
    if raw:
        return list(numbered)
    shown = shown_states(state for state, _ in numbered)
    return [(state, made_by) for state, (_, made_by) in zip(shown, numbered, strict=True)]


async def scope_view(
    store: Store,
    key: str,
    *,
    show_direct: bool,
    strong_title: str = STRONG_TITLE,
    raw: bool = False,
) -> ScopeView | None:
    """The page of a group or (when shown) DM scope key; None when there is no such page.
    strong_title is the strong section's title (pins.header_label), which the estimates count;
    sensitive blocks are shown redacted unless raw."""
    parsed = read_scope(key)
    if parsed is None or parsed.kind is ScopeKind.MEMBER:
        return None  # only keys exactly as the bot writes them
    if parsed.kind is ScopeKind.DIRECT and not show_direct:
        return None
    blocks = await store.blocks([key])
    if parsed.kind is ScopeKind.DIRECT:
        tokens = estimate([], blocks, strong_title).total
        return ScopeView(key, parsed.kind, masked(blocks, raw), tokens)
    by_member: dict[str, list[Block]] = defaultdict(list)
    for block in await store.blocks_with_prefix(members_prefix(key)):
        if read_scope(block.scope) is not None:
            by_member[block.scope].append(block)
    members = [
        (
            scope.removeprefix(members_prefix(key)),
            masked(own, raw),
            estimate(blocks, own, strong_title).total,
        )
        for scope, own in by_member.items()
    ]
    present = {label_key(block.label) for block in blocks}
    removed = [
        label for label in await store.labels_with_versions(key) if label_key(label) not in present
    ]
    tokens = estimate(blocks, [], strong_title).total
    return ScopeView(key, parsed.kind, masked(blocks, raw), tokens, members, removed)


@dataclass(frozen=True)
class VersionView:
    """One version of a shared block on its history page: its number (1 = now), its state
    (None: no block), the change that made it, and the lines it changed from the one before
    (None: not compared, the page's budget for comparing being spent)."""

    number: int
    state: BlockState | None
    made_by: Version | None
    changes: list[tuple[str, str]] | None  # (mark, line): '+' added, '-' taken out, ' ' kept


Numbered = Sequence[tuple[BlockState | None, Version | None]]


def _lines(state: BlockState | None) -> list[str]:
    return state.content.splitlines() if state else []


def diff(numbered: Numbered, number: int) -> list[tuple[str, str]]:
    """What version number changed from the one before it (the next older), line by line, with
    a level, state, priority, sensitivity, keywords or end change as a line of its own. Lines
    are matched whole (no character-level comparison within changed lines, which is what made
    ndiff slow)."""
    after = numbered[number - 1][0]
    before = numbered[number][0] if number < len(numbered) else None
    old, new = _lines(before), _lines(after)
    # What both share at the start and the end is found in linear time; only the middle is
    # matched, and a middle too large to match in bounded time (matching repeated lines is
    # quadratic) is shown as removed then added: every line still shows, in order.
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    changes: list[tuple[str, str]] = [(" ", line) for line in old[:head]]
    old_mid, new_mid = old[head : len(old) - tail], new[head : len(new) - tail]
    if len(old_mid) * len(new_mid) > DIFF_PAIRS:
        changes += [("-", line) for line in old_mid] + [("+", line) for line in new_mid]
    else:
        matcher = difflib.SequenceMatcher(None, old_mid, new_mid, autojunk=False)
        for tag, old_from, old_to, new_from, new_to in matcher.get_opcodes():
            if tag == "equal":
                changes += [(" ", line) for line in old_mid[old_from:old_to]]
                continue
            changes += [("-", line) for line in old_mid[old_from:old_to]]
            changes += [("+", line) for line in new_mid[new_from:new_to]]
    changes += [(" ", line) for line in old[len(old) - tail :]]
    if before and after:
        for name in ("level", "state", "priority", "sensitive"):
            was, now = getattr(before, name), getattr(after, name)
            if was != now:
                shown = [getattr(value, "value", value) for value in (was, now)]
                changes.append(("~", f"{name}: {shown[0]} → {shown[1]}"))
        if before.triggers != after.triggers:
            was_sent, now_sent = (keywords_text(s.triggers) or "always" for s in (before, after))
            changes.append(("~", f"keywords: {was_sent} → {now_sent}"))
        if before.ends_at != after.ends_at:
            was_end, now_end = (_end_words(s.ends_at) for s in (before, after))
            changes.append(("~", f"ends: {was_end} → {now_end}"))
    return changes


def _end_words(ends_at: datetime | None) -> str:
    return "never" if ends_at is None else f"{ends_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def diffs(
    numbered: Numbered,
    *,
    max_lines: int | None = None,
    max_seconds: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[list[tuple[str, str]] | None]:
    """Each version's diff (as diff), newest first, within a budget: the lines compared over
    the whole page (DIFF_LINES) and the time spent (DIFF_SECONDS). Once either is spent, the
    rest are None: listed without what changed. Meant to run off the event loop."""
    lines_left = DIFF_LINES if max_lines is None else max_lines
    deadline = clock() + (DIFF_SECONDS if max_seconds is None else max_seconds)
    found: list[list[tuple[str, str]] | None] = []
    for number in range(1, len(numbered) + 1):
        older = numbered[number][0] if number < len(numbered) else None
        size = len(_lines(numbered[number - 1][0])) + len(_lines(older))
        if size > lines_left or clock() > deadline:
            break
        lines_left -= size
        found.append(diff(numbered, number))
    return found + [None] * (len(numbered) - len(found))


@dataclass
class AuditFilter:
    """The audit page's filters as typed, and what was wrong with them."""

    group: str = ""
    who: str = ""
    kind: str = ""
    since: str = ""
    until: str = ""
    page: int = 0
    problems: list[str] = field(default_factory=list)

    def day(self, text: str, name: str) -> datetime | None:
        """A typed date as the start of that UTC day; a bad one is noted and ignored."""
        if not text:
            return None
        try:
            typed = date.fromisoformat(text)
        except ValueError:
            self.problems.append(f"{name} should be a date like 2026-11-30, not {text!r}")
            return None
        if not FIRST_YEAR <= typed.year <= LAST_YEAR:
            self.problems.append(f"{name} should be a year from {FIRST_YEAR} to {LAST_YEAR}")
            return None
        return datetime(typed.year, typed.month, typed.day, tzinfo=UTC)

    @classmethod
    def of(cls, query: Mapping[str, str]) -> AuditFilter:
        """The filters as typed in a query, each malformed or out-of-range one noted."""
        wanted = cls(
            group=query.get("group", "").strip(),
            who=query.get("who", "").strip(),
            kind=query.get("kind", "").strip(),
            since=query.get("since", "").strip(),
            until=query.get("until", "").strip(),
        )
        if wanted.kind and wanted.kind not in set(ChangeKind):
            kinds = ", ".join(kind.value for kind in ChangeKind)
            wanted.problems.append(f"Change should be one of {kinds}, not {wanted.kind!r}")
        page = query.get("page", "0").strip()
        if page.isdigit() and len(page) <= len(str(MAX_PAGE)) and int(page) <= MAX_PAGE:
            wanted.page = int(page)
        else:
            wanted.problems.append(f"Page should be a whole number from 0 to {MAX_PAGE:,}")
        wanted.day(wanted.since, "From")
        wanted.day(wanted.until, "To")
        return wanted


async def audit_page(store: Store, wanted: AuditFilter) -> list[AuditEntry]:
    """One page of shared-block changes matching the filters, newest first (none while a
    filter has a problem)."""
    if wanted.problems:
        return []
    since = wanted.day(wanted.since, "From")
    until = wanted.day(wanted.until, "To")
    return await store.audit_entries(
        group=wanted.group or None,
        actor=wanted.who or None,
        kind=ChangeKind(wanted.kind) if wanted.kind in set(ChangeKind) else None,
        since=since,
        until=until + timedelta(days=1) if until else None,
        offset=wanted.page * PAGE_SIZE,
        limit=PAGE_SIZE,
    )


@dataclass
class UsageView:
    """Usage per day for everyone, one user or one group, and the top users and groups
    (TOP_ROWS of each)."""

    days: list[tuple[str, UsageTotals]]
    users: list[UsageRow]
    groups: list[UsageRow]


async def usage_view(
    store: Store, now: datetime, days: int, *, user: str = "", group: str = ""
) -> UsageView:
    """Usage over the last days UTC days (today included); user is 'platform:id'."""
    first_day = (now - timedelta(days=days - 1)).date().isoformat()
    platform, _, sender = user.partition(":")
    per_day = await store.usage_days(
        first_day, sender=(platform, sender) if sender else None, group_key=group
    )
    users, groups = await store.usage_report(first_day, TOP_ROWS, window=days)
    return UsageView(per_day, users, groups)


async def usage_today(store: Store, now: datetime) -> UsageTotals:
    """Everyone's usage so far this UTC day."""
    today = await store.usage_days(now.date().isoformat())
    return today[0][1] if today else UsageTotals()


def _found_as_shown(block: Block, text: str) -> bool:
    """Whether text is in what the page shows of block: a sensitive block is not found by
    what its redaction masks, which would tell its secret one search at a time."""
    folded = text.casefold()
    return folded in block.label.casefold() or folded in block.content.casefold()


async def search(store: Store, text: str, *, show_direct: bool) -> list[Block]:
    """Blocks whose label or content (as the page shows it: sensitive blocks redacted)
    contains text (DM scopes only when shown)."""
    if len(text.strip()) < MIN_SEARCH_CHARS:
        return []
    # Groups' scopes (shared and members') by their key prefixes: a search in key order then
    # skips every DM scope at once instead of reading past them.
    found = await platforms(store)
    within = [(direct_prefix(p) if show_direct else None) for p in found] + [
        group_prefix(p) for p in found
    ]
    prefixes = [prefix for prefix in within if prefix is not None]
    if not prefixes:
        return []
    # The store matches stored text, so sensitive blocks found only by what they hide are
    # dropped here: read further (twice as far each time) until the page is full or nothing
    # more matches, so they never crowd out blocks that are found.
    limit = SEARCH_RESULTS
    while True:
        blocks = await store.search_blocks(text.strip(), limit=limit, within=prefixes)
        kept = [
            shown(block)
            for block in blocks
            if read_scope(block.scope) is not None
            and (not block.sensitive or _found_as_shown(shown(block), text.strip()))
        ]
        if len(kept) >= SEARCH_RESULTS or len(blocks) < limit or limit >= MAX_SEARCH_READ:
            return kept[:SEARCH_RESULTS]
        limit *= 2


@dataclass(frozen=True)
class SettingRow:
    """One setting of a group or topic as `/group show` tells it: what applies there, where it
    comes from (config, group, topic), and for a list the config's own, which adds to it."""

    name: str
    shown: str
    source: str
    configured: str | None = None


@dataclass(frozen=True)
class PlaceSettings:
    """A group's settings, or one of its topics' (topic: its id), with what the place sets
    itself (decoded, by name) for its forms."""

    key: str
    topic: str | None
    rows: list[SettingRow]
    own: dict[str, object]


@dataclass(frozen=True)
class SettingsView:
    """A group's settings and those of each topic that sets any (or that the operator asked
    to see), and the models a group may pick (llm.models)."""

    group: PlaceSettings
    topics: list[PlaceSettings]
    models: list[str]


def _configured(config: Config, name: Name, group: str) -> str:
    """What the config says of name for group, in the words `/group show` uses."""
    if name is Name.PINS:
        return "on" if config.pins.enable_in_group else "off"
    if name is Name.MODEL:
        return config.llm.called
    if name is Name.TRIGGER:
        return configured_trigger(config, group)
    if name is Name.BUDGET_DAILY:
        return setting_value(name, config.budgets.group_daily_tokens)
    if name is Name.BUDGET_MONTHLY:
        return setting_value(name, config.budgets.group_monthly_tokens)
    listed = (
        config.pins.group_shared_admin_ids
        if name is Name.ADMINS
        else config.pins.group_strong_user_ids
    )
    return ", ".join(str(entry) for entry in listed) or "nobody"


def place_settings(config: Config, settings: GroupSettings) -> PlaceSettings:
    """A place's settings as the page shows them."""
    rows = []
    for name in Name:
        value, source = settings.value(name)
        lists = name in (Name.ADMINS, Name.STRONG)
        if source is Source.CONFIG:
            shown_now = "nobody" if lists else _configured(config, name, settings.places.group)
        else:
            shown_now = setting_value(name, value)
        rows.append(
            SettingRow(
                name.value,
                shown_now,
                source.value,
                _configured(config, name, settings.places.group) if lists else None,
            )
        )
    places = settings.places
    own = {name.value: stored_value(settings.own(name)) for name in Name}
    return PlaceSettings(places.here, topic_of(places.topic) if places.topic else None, rows, own)


def places_of(group: str, topic: str | None = None) -> Places:
    """Where the settings of a group (its key, as read_scope reads it) or of one of its forum
    topics live: as a message there would find them."""
    parsed = read_scope(group)
    assert parsed is not None and parsed.kind is ScopeKind.SHARED, group
    places = Places.of(Conversation(parsed.platform, ChatKind.GROUP, parsed.owner, None, topic))
    assert places is not None  # a group's conversation has places
    return places


async def settings_view(
    store: Store, config: Config, group: str, *, topic: str | None = None
) -> SettingsView:
    """A group's settings and its topics' (those that set any, and topic if given), read in
    one query."""
    found = await store.settings_under(group, group_children(group)[1])
    own = found.get(group, {})
    topics = {topic_of(place) for place in found if place != group} - {None}
    if topic:
        topics.add(topic)
    shown_topics = []
    for each in sorted(t for t in topics if t is not None):
        places = places_of(group, each)
        topic_own = found.get(places.topic or "", {})
        shown_topics.append(place_settings(config, GroupSettings(places, own, topic_own)))
    return SettingsView(
        place_settings(config, GroupSettings(places_of(group), own, {})),
        shown_topics,
        sorted(config.llm.models),
    )


def entry_shown(entry: AuditEntry) -> tuple[str, str, str]:
    """An audit entry's change, and the content (or value) before and after, as the page shows
    them: a setting's in words ("set trigger: mention → all"), a block's as recorded."""
    if entry.kind is ChangeKind.SETTING:
        name = entry.label.split(":", 1)[0]
        return (
            setting_change(entry),
            setting_value(name, stored_value(entry.old_content)),
            setting_value(name, stored_value(entry.new_content)),
        )
    old, new = entry.old_content, entry.new_content
    return entry.action, "" if old is None else old, "" if new is None else new
