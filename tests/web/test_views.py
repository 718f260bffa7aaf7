"""What the web page's pages are made of, read from a real store: groups paged without loss or
repetition, with exact counts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.web import views
from storage import Store
from storage.models import BlockState, Level, NewBlock, State
from tests.conftest import put_block

NOW = datetime(2026, 11, 30, tzinfo=UTC)


async def add(store: Store, scope: str, count: int) -> None:
    for n in range(count):
        block = NewBlock(scope, f"b{n}", "text", Level.CONTEXT, State.ACTIVE, 0)
        await put_block(store, block, NOW)


@pytest.mark.parametrize(("page_size", "batch"), [(1, 1), (2, 3), (3, 1), (50, 500)])
async def test_groups_are_paged_once_each_with_exact_counts(
    store: Store, monkeypatch: pytest.MonkeyPatch, page_size: int, batch: int
) -> None:
    monkeypatch.setattr(views, "PAGE_SIZE", page_size)
    monkeypatch.setattr(views, "SCAN_BATCH", batch)
    # Keys sort bytewise: "-12" and "-1234" come between "-1" and "-1::u:…".
    await add(store, "telegram:group:-1", 2)
    await add(store, "telegram:group:-1::u:5", 3)
    await add(store, "telegram:group:-1::u:6", 1)
    await add(store, "telegram:group:-12::u:7", 4)  # members only
    await add(store, "telegram:group:-1234", 1)
    await add(store, "telegram:group:-2", 5)
    await add(store, "feishu:group:oc_1", 1)
    await add(store, "telegram:direct:9", 3)  # a DM is never a group
    shown: list[views.GroupRow] = []
    after = ""
    while True:
        page = await views.groups_page(store, after)
        assert len(page.rows) <= page_size
        shown += page.rows
        if page.next_after is None:
            break
        after = page.next_after
    counts = {row.key: (row.shared_blocks, row.members, row.member_blocks) for row in shown}
    assert len(shown) == len(counts)  # none twice
    assert counts == {
        "feishu:group:oc_1": (1, 0, 0),
        "telegram:group:-1": (2, 2, 4),
        "telegram:group:-12": (0, 1, 4),
        "telegram:group:-1234": (1, 0, 0),
        "telegram:group:-2": (5, 0, 0),
    }


def test_a_diff_of_many_repeated_lines_is_bounded_and_shows_every_line() -> None:
    """Matching repeated lines is quadratic: past a size the middle shows as removed then added,
    every line in order, the shared start and end as they are."""
    from bot.web.views import diff

    old = "\n".join(["head", *["a"] * 2000, "tail"])
    new = "\n".join(["head", *["a", "b"] * 1000, "tail"])
    before, after = (BlockState(text, Level.CONTEXT, State.ACTIVE) for text in (old, new))
    changes = diff([(after, None), (before, None)], 1)
    assert changes[0] == (" ", "head") and changes[-1] == (" ", "tail")
    assert [line for mark, line in changes if mark in " -"] == old.split("\n")
    assert [line for mark, line in changes if mark in " +"] == new.split("\n")
