"""Signing in to the web page: one token, compared in constant time, a few failed attempts per
address and minute, and sessions held by this process, each with the token its forms carry."""

from __future__ import annotations

import hmac
import secrets
from datetime import timedelta

from bot.clock import Clock
from storage.buckets import TokenBuckets

SIGN_INS_PER_MINUTE = 5  # per address: a guessing attacker gets five tries a minute
SESSION_LIFETIME = timedelta(hours=12)


class SignIn:
    """Checks sign-in tokens and keeps the sessions they open."""

    def __init__(self, token: str, clock: Clock) -> None:
        self._token = token.encode()
        self._clock = clock
        self._attempts = TokenBuckets()
        # session id → (when it expires in epoch seconds, the session's CSRF token)
        self._sessions: dict[str, tuple[float, str]] = {}

    def attempt(self, address: str, given: str) -> str | float | None:
        """Try a token from address: a new session id when it is right, None when it is wrong,
        or the seconds to wait when address has used up its attempts (the token is then not
        even compared)."""
        now = self._clock().timestamp()
        wait = self._attempts.take(
            address, capacity=SIGN_INS_PER_MINUTE, per_s=SIGN_INS_PER_MINUTE / 60, now=now
        )
        if wait is not None:
            return wait
        if not hmac.compare_digest(given.encode(), self._token):
            return None
        session = secrets.token_urlsafe(32)
        expires = now + SESSION_LIFETIME.total_seconds()
        self._sessions[session] = (expires, secrets.token_urlsafe(32))
        self._forget_expired(now)
        return session

    def valid(self, session: str | None) -> bool:
        """Whether session is a live session of this process."""
        if not session:
            return False
        found = self._sessions.get(session)
        return found is not None and found[0] > self._clock().timestamp()

    def csrf_token(self, session: str | None) -> str:
        """The token every form of this session carries ('' for no live session)."""
        found = self._sessions.get(session or "") if self.valid(session) else None
        return found[1] if found else ""

    def csrf_ok(self, session: str | None, given: str) -> bool:
        """Whether given is this live session's form token (compared in constant time)."""
        expected = self.csrf_token(session)
        return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())

    def end(self, session: str | None) -> None:
        """Sign a session out."""
        if session:
            self._sessions.pop(session, None)

    def _forget_expired(self, now: float) -> None:
        for session in [s for s, (expires, _) in self._sessions.items() if expires <= now]:
            del self._sessions[session]
