"""The one way a reply waits for the inbox: a ReplySurface answering after_commit sends at once,
or, while an update from the inbox is processed (from_inbox), holds its replies for the inbox to
send."""

from __future__ import annotations

import pytest

from bot.adapters.kit import Lost, after_commit, from_inbox, in_inbox, unless_lost
from bot.core.entry import ReplySurface
from bot.core.replies import Reply
from storage.errors import Unavailable


class Answers:
    """What a surface sent, in order."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def __call__(self, reply: Reply) -> None:
        self.sent.append(reply.text)


async def test_outside_the_inbox_a_reply_goes_at_once() -> None:
    answers = Answers()
    surface = ReplySurface(after_commit(answers))
    assert not in_inbox()
    assert surface.on_text is None
    async with surface.thinking():
        pass
    await surface.send(Reply("hello"))
    assert answers.sent == ["hello"]


async def test_from_the_inbox_replies_are_held_for_the_inbox_in_order() -> None:
    answers = Answers()
    seen: list[bool] = []

    async def process() -> None:
        surface = ReplySurface(after_commit(answers))
        seen.append(in_inbox())
        await surface.send(Reply("one"))
        await surface.send(Reply("two", buttons=()))

    held = await from_inbox(process())
    assert seen == [True] and answers.sent == [] and not in_inbox()
    assert held == [Reply("one"), Reply("two", buttons=())]


async def test_an_update_that_sends_nothing_has_nothing_to_send() -> None:
    async def process() -> None:
        ReplySurface(after_commit(Answers()))

    assert await from_inbox(process()) == []


async def test_a_lost_update_sends_nothing_and_stays_waiting() -> None:
    answers = Answers()

    async def unreachable() -> str:
        raise Unavailable("the database is gone")

    async def process() -> None:
        await ReplySurface(after_commit(answers)).send(Reply("too early"))
        assert isinstance(await unless_lost(unreachable()), Lost)

    with pytest.raises(Unavailable):
        await from_inbox(process())
    assert answers.sent == [] and not in_inbox()
    with pytest.raises(Unavailable):  # outside the inbox it is not swallowed
        await unless_lost(unreachable())

    async def reachable() -> str:
        return "fine"

    assert await unless_lost(reachable()) == "fine"
