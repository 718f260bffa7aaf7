"""python-telegram-bot's HTTP requests over aiohttp instead of its default httpx.

Every update the bot answers costs at least one request (the reply) and, in polling mode, a
share of a getUpdates call. On this project's machine httpx spends about five times the CPU of
aiohttp on such a request (~0.9 ms against ~0.18 ms with eight connections in use: httpcore asks
each pooled connection for its socket's peer name on every request), so the request layer was
most of a `/pin add`'s cost. aiohttp is already what pinbot serves webhooks and the web page with.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData
from yarl import URL

from bot.adapters.kit import Reachability

# python-telegram-bot's own defaults for HTTPXRequest, in seconds.
READ_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
POOL_TIMEOUT_S = 1.0
MEDIA_WRITE_TIMEOUT_S = 20.0


@functools.lru_cache(maxsize=16)
def _proxy(origin: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy (and its credentials) that HTTP(S)_PROXY and NO_PROXY name for an origin
    (scheme://host:port), read once: aiohttp's own trust_env reads the environment and ~/.netrc
    in a thread on every request."""
    try:
        return get_env_proxy_for_url(URL(origin))
    except LookupError:
        return None, None


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _given(value: ODVInput[float], default: float | None) -> float | None:
    """A timeout as passed to a request, or default when the caller left it unset."""
    return default if isinstance(value, DefaultValue) else value


class AiohttpRequest(BaseRequest):
    """Requests to the Bot API through one aiohttp session of at most `connections` connections.
    Timeouts mean what python-telegram-bot documents: connect, read, and waiting for a pooled
    connection; aiohttp has no write timeout, so a request's writing is bounded by the sum of all
    four (the whole request never takes longer). Proxies come from HTTP(S)_PROXY, as with httpx.
    """

    __slots__ = (
        "_connections",
        "_keeps_updates",
        "_monotonic",
        "_read_timeout",
        "_session",
        "answered_at",
        "polled",
        "reach",
    )

    def __init__(
        self,
        connections: int,
        *,
        read_timeout: float | None = READ_TIMEOUT_S,
        monotonic: Callable[[], float] = time.monotonic,
        keeps_updates: bool = False,
    ) -> None:
        self._connections = connections
        self._keeps_updates = keeps_updates
        # With keeps_updates (the getUpdates request): each update of the last answer as
        # Telegram sent it, by update id, until taken (take_polled).
        self.polled: dict[int, dict[str, Any]] = {}
        self._read_timeout = read_timeout
        self._monotonic = monotonic
        self._session: aiohttp.ClientSession | None = None
        self.answered_at: float | None = None  # monotonic() of the last 200 answer
        self.reach = Reachability(monotonic)  # whether Telegram answers these requests

    def parse_json_payload(self, payload: bytes) -> dict[str, Any]:  # type: ignore[override]
        """Telegram's answer as python-telegram-bot reads it; with keeps_updates, each update it
        holds is also kept as sent, so that recording it costs no conversion back from
        python-telegram-bot's objects (which took more CPU than the rest of a `/pin add`'s
        handling outside the database)."""
        answer = BaseRequest.parse_json_payload(payload)
        if self._keeps_updates and isinstance(answer.get("result"), list):
            self.polled = {
                item["update_id"]: item
                for item in answer["result"]
                if isinstance(item, dict) and type(item.get("update_id")) is int
            }
        return answer

    def take_polled(self, update_id: int) -> dict[str, Any] | None:
        """The update update_id as the last getUpdates answer held it (once), if kept."""
        return self.polled.pop(update_id, None)

    @property
    def read_timeout(self) -> float | None:
        """The read timeout used when a request does not pass its own."""
        return self._read_timeout

    async def initialize(self) -> None:
        """Open the session (again, after shutdown)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections),
                headers={"User-Agent": self.USER_AGENT},
            )

    async def shutdown(self) -> None:
        """Close the session and its connections."""
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """Send one request; its HTTP status and body. TimedOut when a timeout passes once the
        request may have been sent (it may have arrived); NetworkError when the connection fails
        or cannot be made in time (nothing was sent)."""
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data.multipart_data if request_data else None
        body: Any = request_data.json_parameters if request_data else None
        if files:
            form = aiohttp.FormData(body or {})
            for name, (filename, content, mimetype) in files.items():
                form.add_field(name, content, filename=filename, content_type=mimetype)
            body = form
        default_write = MEDIA_WRITE_TIMEOUT_S if files else WRITE_TIMEOUT_S
        timeouts = (
            _given(connect_timeout, CONNECT_TIMEOUT_S),
            _given(read_timeout, self._read_timeout),
            _given(write_timeout, default_write),
            _given(pool_timeout, POOL_TIMEOUT_S),
        )
        connect, read, _, pool = timeouts
        timeout = aiohttp.ClientTimeout(
            total=None if None in timeouts else sum(t for t in timeouts if t is not None),
            connect=None if connect is None or pool is None else connect + pool,
            sock_connect=connect,
            sock_read=read,
        )
        try:
            proxy, proxy_auth = _proxy(_origin(url))
            async with session.request(
                method, url, data=body, timeout=timeout, proxy=proxy, proxy_auth=proxy_auth
            ) as response:
                answer = response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as error:
            self.reach.failed()
            raise NetworkError(f"no connection in time: {error}") from error
        except TimeoutError as error:  # aiohttp's own timeouts are TimeoutErrors too
            self.reach.failed()
            raise TimedOut from error
        except aiohttp.ClientError as error:
            self.reach.failed()
            raise NetworkError(f"aiohttp.{type(error).__name__}: {error}") from error
        if answer[0] >= HTTPStatus.INTERNAL_SERVER_ERROR:
            self.reach.failed()
        else:
            self.reach.answered()
        if answer[0] == HTTPStatus.OK:
            self.answered_at = self._monotonic()
        return answer
