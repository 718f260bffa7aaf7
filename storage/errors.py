"""What the store reports when a write cannot be made or the database cannot be reached: named
exceptions, so callers decide by type, never by wording, and never see a driver's exceptions."""

from __future__ import annotations

from storage.models import Budget


class StoreError(Exception):
    """Anything the store refuses or cannot do."""


class Unavailable(StoreError):
    """The database cannot be opened or reached now; the message says why, without secrets."""


class Locked(Unavailable):
    """Another connection holds the database's write lock past the wait: nothing can be
    written now (SQLite)."""


class SchemaTooNew(StoreError):
    """The database was made by a newer pinbot than this one."""


class WorkerConflict(StoreError):
    """Another live process already holds what this worker asked to hold alone."""


class Conflict(StoreError):
    """What the write was based on changed before it landed: read again and decide again."""


class Stale(Conflict):
    """A label changed after the change to it was reviewed (its newest version is another, or
    it came or went): label is its stored spelling."""

    def __init__(self, label: str) -> None:
        super().__init__(f"block {label!r} changed since it was read")
        self.label = label


class AlreadyDecided(StoreError):
    """The proposal a change would carry out is no longer pending: another decision came
    first, and nothing was written."""

    def __init__(self, number: int) -> None:
        super().__init__(f"proposal #{number} was decided already")
        self.number = number


class LabelTaken(StoreError):
    """The scope already has a block of this label; label is its stored spelling."""

    def __init__(self, label: str) -> None:
        super().__init__(f"label {label!r} is taken")
        self.label = label


class LimitReached(StoreError):
    """The scope already holds limit blocks."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the scope holds {limit} blocks")
        self.limit = limit


class OverBudget(StoreError):
    """The write would grow the scope's content to total characters, past budget."""

    def __init__(self, total: int, budget: int) -> None:
        super().__init__(f"{total} characters is over the budget of {budget}")
        self.total = total
        self.budget = budget


class BudgetSpent(StoreError):
    """A budget is used up: the tokens and cost used and held by calls in flight when asked."""

    def __init__(self, budget: Budget, tokens: int, cost: float) -> None:
        super().__init__(f"budget {budget.name} is used up")
        self.budget = budget
        self.tokens = tokens
        self.cost = cost
