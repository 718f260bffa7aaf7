"""The web page's HTTP side (aiohttp): sign-in, the pages, the forms that change a group's
shared blocks (through the same BlockOps as `/pin shared`), a person's data handed over or
removed (through the same code as `/export me` and `/forget me`), and what keeps them safe:
headers that let content people typed be only text, and a per-session token on every form."""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import jinja2
from aiohttp import web
from aiohttp.helpers import content_disposition_header

from bot.clock import Clock, utc_now
from bot.config import Config
from bot.core.blocks import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    BlockOps,
    BlockPolicy,
    BlockVersions,
    Done,
    Ends,
    Outcome,
    Refused,
    Rule,
    Target,
    count_refusal,
    default_level,
    parse_keywords,
    parse_until,
    refusal,
)
from bot.core.commands import PersonCommands, PersonData
from bot.core.groups import GroupCommands, Places, parse_group
from bot.core.people import ScopeKind, group_key_of, parse_scope, platform_of, read_scope
from bot.core.replies import Reply, Result
from bot.web import views
from bot.web.auth import SignIn
from bot.web.charts import NARROW_WIDTH, bar_chart
from bot.web.person import KINDS, Person, person_page, read_person, scope_person_page
from storage import Store
from storage.models import Author, ChangeKind, Channel, Level, State, UsageTotals, label_key

log = logging.getLogger(__name__)

SESSION_COOKIE = "pinbot_session"
MAX_USAGE_DAYS = 366
AUDIT_KINDS = tuple(kind.value for kind in ChangeKind)
# Nothing on these pages runs script, loads from elsewhere, or may be framed: content people
# typed can only ever be text.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # our own forms must carry their Origin
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The export file holds a person's direct chat whole: the page gives it only where the operator
# chose to show direct chats (web.show_direct), as no other page shows one otherwise.
EXPORT_HIDDEN = "This page gives no export while it keeps direct chats private: see Export below."
NOT_CONFIRMED = "Nothing was removed: tick the box to confirm that it cannot be undone."
END_HINT = "give a date and time in UTC (2026-12-24T18:00), or nothing for no end"
# A form's priority that is no whole number: the priority rule's refusal.
NOT_A_PRIORITY = refusal(Rule.PRIORITY, low=PRIORITY_MIN, high=PRIORITY_MAX)
# A forum topic's id as the page takes it (Telegram's thread numbers, Feishu's thread ids).
TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# What each settings form sets: `/group <words>` as the chat writes it, from the form's value
# (and for a list, add or remove and the person).
SETTING_FORMS = {
    "pins": "pins {value}",
    "admins": "admins {verb} {person}",
    "strong": "strong {verb} {person}",
    "model": "model {value}",
    "trigger": "trigger {value}",
    "budget_daily": "budget daily {value}",
    "budget_monthly": "budget monthly {value}",
    "reset": "reset",
}


@dataclass(frozen=True)
class Flash:
    """What the last change did (kind 'done' or 'refused', and the message), and for a refused
    one the fields of the form as typed, to fill it in again."""

    kind: str
    message: str
    typed: dict[str, str] = field(default_factory=dict)
    code: str = ""  # the block rule that refused it, for readers that need no English

    def kept(self, form: str, name: str, default: str) -> str:
        """The typed value of field name if form (its `form` field) was the one refused."""
        if self.kind != "refused" or self.typed.get("form") != form:
            return default
        return self.typed.get(name, default)


class WebPage:
    """The operator's page over one store: sign-in with the token, pages to read everything
    shown, and forms that change groups' shared blocks (personal blocks stay their owners')."""

    def __init__(self, store: Store, config: Config, token: str, *, clock: Clock = utc_now) -> None:
        self.store = store
        self.config = config.web
        self.pricing = config.pricing
        self.clock = clock
        self.sign_in = SignIn(token, clock)
        self.ops = BlockOps(store, BlockPolicy(config.pins), clock)
        self.history = BlockVersions(store, self.ops)
        self.person_data = PersonData(store, self.ops, clock)
        self.people = PersonCommands(self.person_data)  # what /export me and /forget me run
        self.settings_config = config
        self.groups = GroupCommands(store, config, clock)  # what /group runs
        name = config.web.operator_name.strip()
        self.actor = f"web:{name}" if name else "web"
        self._flash: dict[str, Flash] = {}  # per session: what the last change did, shown once
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
            autoescape=True,  # every value is text, never markup
            undefined=jinja2.StrictUndefined,
        )
        self.templates.globals.update(
            levels=[level.value for level in Level],
            shared_default_level=default_level(group=True).value,
        )
        self.templates.filters["segment"] = views.segment
        self.templates.filters["keywords"] = views.keywords_text
        self.templates.filters["end"] = views.end_text
        self.templates.globals.update(entry_shown=views.entry_shown)
        # Where a page names a person, it links to everything held about them.
        self.templates.globals.update(
            person_page=person_page, scope_person_page=scope_person_page, platform_of=platform_of
        )

    def app(self) -> web.Application:
        """The aiohttp application serving every page."""
        app = web.Application(middlewares=[self._headers, self._signed_in, self._forms_checked])
        app.router.add_get("/signin", self.signin_form)
        app.router.add_post("/signin", self.signin)
        app.router.add_post("/signout", self.signout)
        app.router.add_get("/", self.overview)
        app.router.add_get("/direct", self.direct)
        app.router.add_get("/scope/{key}", self.scope)
        app.router.add_post("/scope/{key}/add", self.add_block)
        app.router.add_post("/scope/{key}/change", self.change_block)
        app.router.add_get("/scope/{key}/remove", self.remove_form)
        app.router.add_post("/scope/{key}/remove", self.remove_block)
        app.router.add_post("/scope/{key}/restore", self.restore_block)
        app.router.add_post("/scope/{key}/settings", self.change_setting)
        app.router.add_get("/scope/{key}/history", self.block_history)
        app.router.add_get("/scope/{key}/history/{label:.+}", self.block_history)
        app.router.add_get("/audit", self.audit)
        app.router.add_get("/usage", self.usage)
        app.router.add_get("/search", self.search)
        app.router.add_get("/person", self.person)
        # A HEAD would make the file (and log an export) for nothing.
        app.router.add_get("/person/export", self.export_person, allow_head=False)
        app.router.add_get("/person/forget", self.forget_form)
        app.router.add_post("/person/forget", self.forget_person)
        return app

    # --- plumbing -----------------------------------------------------------------------------

    @web.middleware
    async def _headers(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as redirect:  # redirects and errors are answers too
            redirect.headers.update(SECURITY_HEADERS)
            raise
        response.headers.update(SECURITY_HEADERS)
        return response

    @web.middleware
    async def _signed_in(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/signin" or self.sign_in.valid(request.cookies.get(SESSION_COOKIE)):
            return await handler(request)
        raise web.HTTPSeeOther("/signin")

    @web.middleware
    async def _forms_checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """A form posted by a signed-in session must carry that session's token and come from
        this page's own origin; anything else is refused with 403 and changes nothing."""
        if request.method != "POST" or request.path == "/signin":
            return await handler(request)
        origin = request.headers.get("Origin") or request.headers.get("Referer")
        if origin and urlsplit(origin).netloc != request.host:
            raise web.HTTPForbidden(text="This form came from another site.")
        given = (await request.post()).get("csrf")
        if not isinstance(given, str) or not self.sign_in.csrf_ok(
            request.cookies.get(SESSION_COOKIE), given
        ):
            raise web.HTTPForbidden(text="This form is out of date or not from this page.")
        return await handler(request)

    def render(
        self,
        request: web.Request,
        name: str,
        *,
        status: int = 200,
        section: str = "",
        **values: Any,
    ) -> web.Response:
        """A page from its template, with what every page needs."""
        session = request.cookies.get(SESSION_COOKIE)
        flash = self._flash.pop(session or "", None)
        html = self.templates.get_template(name).render(
            signed_in=name != "signin.html",
            show_direct=self.config.show_direct,
            section=section,
            csrf=self.sign_in.csrf_token(session),
            flash=flash,
            kept=flash.kept if flash else lambda form, field, default: default,
            **values,
        )
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    # --- signing in -----------------------------------------------------------------------------

    async def signin_form(self, request: web.Request) -> web.Response:
        """The sign-in form (and nothing else)."""
        return self.render(request, "signin.html", problem="")

    async def signin(self, request: web.Request) -> web.Response:
        """Check the token: a session cookie when right; a refusal, and no data, otherwise."""
        form = await request.post()
        given = form.get("token")
        result = self.sign_in.attempt(
            request.remote or "unknown", given if isinstance(given, str) else ""
        )
        address = request.remote or "unknown"
        if isinstance(result, float):
            # An operator learns of a guessing address from the log (never the token tried).
            log.warning(
                "web sign-in refused from %s: too many attempts, locked for %d s",
                address,
                math.ceil(result),
            )
            problem = (
                f"Too many sign-in attempts from your address. Try again in {math.ceil(result)} s."
            )
            return self.render(request, "signin.html", status=429, problem=problem)
        if result is None:
            log.warning("web sign-in failed from %s: the token given is not the one", address)
            return self.render(
                request, "signin.html", status=401, problem="That token is not right."
            )
        response = web.HTTPSeeOther("/")
        response.set_cookie(
            SESSION_COOKIE,
            result,
            httponly=True,
            samesite="Strict",
            secure=self.config.secure_cookie,
            path="/",
        )
        raise response

    async def signout(self, request: web.Request) -> web.Response:
        """End the session and forget the cookie."""
        self.sign_in.end(request.cookies.get(SESSION_COOKIE))
        response = web.HTTPSeeOther("/signin")
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    # --- pages ----------------------------------------------------------------------------------

    async def overview(self, request: web.Request) -> web.Response:
        """Groups with their block counts, the latest changes, and today's tokens."""
        page = await views.groups_page(self.store, request.query.get("after", ""))
        entries = await self.store.audit_entries(limit=10)
        today = await views.usage_today(self.store, self.clock())
        return self.render(
            request, "overview.html", section="overview", page=page, entries=entries, today=today
        )

    async def direct(self, request: web.Request) -> web.Response:
        """DM scopes, when the operator chose to show them."""
        if not self.config.show_direct:
            return self.render(request, "not_found.html", status=404)
        page = await views.direct_page(self.store, request.query.get("after", ""))
        return self.render(request, "direct.html", section="direct", page=page)

    async def scope(self, request: web.Request) -> web.Response:
        """One group's shared and members' blocks, or one DM's (when shown); sensitive blocks
        redacted unless the operator opens the raw view (?raw=1)."""
        raw = _raw(request)
        view = await views.scope_view(
            self.store,
            request.match_info["key"],
            show_direct=self.config.show_direct,
            strong_title=self.ops.policy.pins.header_label,
            raw=raw,
        )
        if view is None:
            return self.render(request, "not_found.html", status=404)
        settings = None
        if view.kind is ScopeKind.SHARED:
            typed = request.query.get("topic", "").strip()
            topic = typed if TOPIC_ID.fullmatch(typed) else None
            settings = await views.settings_view(
                self.store, self.settings_config, view.key, topic=topic
            )
        return self.render(
            request,
            "scope.html",
            section="overview",
            view=view,
            raw=raw,
            now=self.clock(),
            settings=settings,
        )

    # --- changing shared blocks ---------------------------------------------------------------

    def _shared_target(self, request: web.Request) -> Target:
        """The group whose shared blocks a form changes: only a shared scope's key exactly as
        the bot itself writes it (keys.read_scope: a platform the bot serves, ids of the form
        that platform gives); anything else is 404 and changes nothing."""
        key = request.match_info["key"]
        parsed = read_scope(key)
        if parsed is None or parsed.kind is not ScopeKind.SHARED:
            raise web.HTTPNotFound(text="Only a group's shared blocks can be changed here.")
        return Target.operator(key, self.actor)

    async def _after(self, request: web.Request, target: Target, outcome: Outcome) -> web.Response:
        """Back to the group's page, which shows what happened, or why nothing did with what
        was typed still in the form."""
        session = request.cookies.get(SESSION_COOKIE, "")
        count_refusal(outcome)
        if isinstance(outcome, Done):
            self._flash[session] = Flash("done", outcome.message)
        else:
            form = await request.post()
            typed = {name: _text(form, name) for name in form if name != "csrf"}
            code = outcome.code.value if outcome.code else ""
            self._flash[session] = Flash("refused", outcome.reason, typed, code)
        raise web.HTTPSeeOther(f"/scope/{views.segment(target.scope)}")

    async def add_block(self, request: web.Request) -> web.Response:
        """Add a shared block, as `/pin shared add` would."""
        target = self._shared_target(request)
        form = await request.post()
        priority = _whole_number(_text(form, "priority") or "0")
        if priority is None:
            return await self._after(request, target, NOT_A_PRIORITY)
        timing = _timing(form)
        if isinstance(timing, Refused):
            return await self._after(request, target, timing)
        outcome = await self.ops.add(
            target,
            _text(form, "label").strip(),
            _text(form, "content").strip(),
            level=Level(_text(form, "level")) if _text(form, "level") in set(Level) else None,
            pinned=_text(form, "pinned") == "on",
            priority=priority,
            sensitive=_text(form, "sensitive") == "on",
            triggers=timing[0] or (),
            ends=timing[1],
        )
        return await self._after(request, target, outcome)

    async def change_block(self, request: web.Request) -> web.Response:
        """Change a shared block's content, level, state, priority, sensitivity, keywords or end,
        as `/pin shared edit` (with --when and --until), `level`, `idle`/`activate`,
        `pin`/`unpin`, `priority` and `sensitive` would. A form without content (a sensitive
        block's, outside the raw view, whose content the page does not show) keeps the
        content; keywords and an end as the form showed them stay as they are."""
        target = self._shared_target(request)
        form = await request.post()
        priority = _whole_number(_text(form, "priority"))
        if priority is None:
            return await self._after(request, target, NOT_A_PRIORITY)
        level, state = _text(form, "level"), _text(form, "state")
        timing = _timing(form)
        if isinstance(timing, Refused):
            return await self._after(request, target, timing)
        outcome = await self.ops.change(
            target,
            _text(form, "label"),
            content=_text(form, "content").strip() if "content" in form else None,
            level=Level(level) if level in set(Level) else None,
            state=State(state) if state in set(State) else None,
            priority=priority,
            # The box is in every change form; a form without it leaves the flag as it is.
            sensitive=_text(form, "sensitive") == "on" if "sensitive_box" in form else None,
            triggers=timing[0],
            ends=timing[1],
        )
        return await self._after(request, target, outcome)

    async def remove_form(self, request: web.Request) -> web.Response:
        """The confirmation of a removal: the shared block ?label= as the group's page shows
        it, that it can be brought back for a while, and the button that removes it. Changes
        nothing; a label the group has not is 404."""
        target = self._shared_target(request)
        return await self._remove_page(request, target, request.query.get("label", ""))

    async def remove_block(self, request: web.Request) -> web.Response:
        """Remove a shared block, as `/pin shared remove` would, once confirmed (the form of
        the confirmation page carries confirm=yes); unconfirmed, the confirmation page (400),
        and nothing is removed."""
        target = self._shared_target(request)
        form = await request.post()
        if _text(form, "confirm") != "yes":
            return await self._remove_page(request, target, _text(form, "label"), status=400)
        outcome = await self.ops.remove(target, _text(form, "label"))
        return await self._after(request, target, outcome)

    async def _remove_page(
        self, request: web.Request, target: Target, label: str, *, status: int = 200
    ) -> web.Response:
        """The page asking to confirm the removal of the group's shared block label."""
        view = await views.scope_view(
            self.store,
            target.scope,
            show_direct=self.config.show_direct,
            strong_title=self.ops.policy.pins.header_label,
            raw=False,
        )
        key = label_key(label)
        block = next((b for b in view.blocks if label_key(b.label) == key), None) if view else None
        if block is None:
            return self.render(request, "not_found.html", status=404)
        return self.render(
            request,
            "remove.html",
            status=status,
            section="overview",
            key=target.scope,
            block=block,
            kept_days=self.settings_config.retention_in_effect.versions,
        )

    async def restore_block(self, request: web.Request) -> web.Response:
        """Bring back a version of a shared block (a removed one too), as `/pin shared
        restore` would."""
        target = self._shared_target(request)
        form = await request.post()
        # Not a whole number (0): no version has it, and the refusal says which ones there are.
        number = _whole_number(_text(form, "version")) or 0
        outcome = await self.history.restore(target, _text(form, "label"), number)
        return await self._after(request, target, outcome)

    # --- changing a group's own settings -----------------------------------------------------

    async def change_setting(self, request: web.Request) -> web.Response:
        """Change a group's setting, or a topic's (the form's `topic`), as `/group` in the
        chat would (`setting`: pins, admins, strong, model, trigger, budget_daily,
        budget_monthly, reset or undo; `value`, or `verb` and `person` for a list): the same
        words read by the same parser, the same review (a model of llm.models, budgets within
        the operator's caps), one version and one audit entry naming the web operator. Back
        to the group's page, which says what was done or why nothing was."""
        group = self._shared_target(request).scope
        form = await request.post()
        topic = _text(form, "topic").strip()
        if topic and not TOPIC_ID.fullmatch(topic):
            reply = Reply.refused(f"'{topic[:64]}' is not a topic id (its number, or its id).")
        else:
            reply = await self._setting_reply(views.places_of(group, topic or None), form)
        kind = "done" if reply.outcome is Result.DONE else "refused"
        self._flash[request.cookies.get(SESSION_COOKIE, "")] = Flash(kind, reply.text)
        shown = f"?topic={views.segment(topic)}" if topic else ""
        raise web.HTTPSeeOther(f"/scope/{views.segment(group)}{shown}#settings")

    async def _setting_reply(self, places: Places, form: Any) -> Reply:
        """What `/group` would say to the form's change at places, made as the web operator."""
        setting = _text(form, "setting")
        if setting == "undo":
            return await self.groups.undo(places, self.actor)
        words = SETTING_FORMS.get(setting)
        if words is None:
            return Reply.refused(f"There is no setting '{setting[:64]}'.")
        fields = {name: _text(form, name).strip() for name in ("value", "verb", "person")}
        if setting in ("admins", "strong") and not fields["person"]:
            return Reply.refused("Whom? Give the person's id (they can see it with /whoami).")
        if setting.startswith("budget") and not fields["value"]:
            fields["value"] = "default"  # empty: back to the config's
        for value in fields.values():
            if len(value.split()) > 1:
                return Reply.refused(f"'{value[:64]}' is more than one word: give one.")
        command = parse_group(words.format(**fields))
        if isinstance(command, str):
            return Reply.refused(command.split("\n", 1)[0])  # without /group's usage
        return await self.groups.change(places, command, Author(self.actor, Channel.WEB))

    async def block_history(self, request: web.Request) -> web.Response:
        """A shared block's versions, newest first, each with what changed from the one before
        (compared off the event loop, within the page's budget) and a button that brings it
        back. The label comes as ?label= (any label, encoded) or as the rest of the path."""
        target = self._shared_target(request)
        label = request.match_info.get("label") or request.query.get("label", "")
        numbered = await self.history.numbered(target, label) if label else []
        if not numbered:
            return self.render(request, "not_found.html", status=404)
        raw = _raw(request)
        numbered = views.masked_states(numbered, raw)
        changes = await asyncio.to_thread(views.diffs, numbered)
        versions = [
            views.VersionView(number, state, made_by, changes[number - 1])
            for number, (state, made_by) in enumerate(numbered, start=1)
        ]
        return self.render(
            request,
            "history.html",
            section="overview",
            key=target.scope,
            label=label,
            versions=versions,
            compared=sum(found is not None for found in changes),
            raw=raw,
        )

    async def audit(self, request: web.Request) -> web.Response:
        """The audit log of shared blocks, filtered and paged."""
        query = request.query
        wanted = views.AuditFilter.of(query)
        entries = await views.audit_page(self.store, wanted)
        filters = {k: v for k, v in query.items() if k != "page"}
        next_page = "/audit?" + urlencode({**filters, "page": wanted.page + 1})
        return self.render(
            request,
            "audit.html",
            status=400 if wanted.problems else 200,
            section="audit",
            wanted=wanted,
            entries=entries,
            kinds=AUDIT_KINDS,
            more=len(entries) == views.PAGE_SIZE,
            next_page=next_page,
        )

    async def usage(self, request: web.Request) -> web.Response:
        """Tokens per day as a chart, for everyone, one user or one group; top users, groups."""
        query = request.query
        problems = []
        text = query.get("days", "30").strip()
        in_range = text.isdigit() and len(text) <= len(str(MAX_USAGE_DAYS))
        days = int(text) if in_range and 1 <= int(text) <= MAX_USAGE_DAYS else 30
        if str(days) != text:
            problems.append(f"Days should be a whole number from 1 to {MAX_USAGE_DAYS}.")
        user, group = query.get("user", "").strip(), query.get("group", "").strip()
        if user and ":" not in user.strip(":"):
            problems.append("User should be written platform:id, e.g. telegram:42.")
            user = ""
        view = await views.usage_view(self.store, self.clock(), days, user=user, group=group)
        every_day = _every_day(view.days, self.clock(), days)
        chart, narrow_chart = bar_chart(every_day), bar_chart(every_day, width=NARROW_WIDTH)
        return self.render(
            request,
            "usage.html",
            status=400 if problems else 200,
            section="usage",
            view=view,
            chart=chart,
            narrow_chart=narrow_chart,
            days=days,
            user=user,
            group=group,
            problems=problems,
            top=views.TOP_ROWS,
            currency=self.pricing.currency,
        )

    async def search(self, request: web.Request) -> web.Response:
        """Blocks by label or content."""
        query = request.query.get("q", "")
        results = await views.search(self.store, query, show_direct=self.config.show_direct)
        return self.render(
            request,
            "search.html",
            section="search",
            query=query,
            results=results,
            limit=views.SEARCH_RESULTS,
            min_chars=views.MIN_SEARCH_CHARS,
            page_of=_page_of,
        )

    # --- a person's data ------------------------------------------------------------------------

    async def person(self, request: web.Request) -> web.Response:
        """The form to look a person up by platform:id and, for a person typed (?user=), how
        much is held about them by kind ("nothing held" when nothing is), with their export and
        their forget. A mistyped person gets what is wrong with it (400), and no data."""
        typed = request.query.get("user", "")
        if not typed.strip():
            return self._person_page(request, typed)
        found = read_person(typed)
        if isinstance(found, str):
            return self._person_page(request, typed, status=400, problem=found)
        counts = await self.person_data.counts(found.platform, found.user)
        return self._person_page(request, str(found), person=found, counts=counts)

    async def export_person(self, request: web.Request) -> web.StreamResponse:
        """Everything held about the person ?user= as the JSON file `/export me` gives them
        (the same code), downloaded under that file's name. Only where the page shows direct
        chats (web.show_direct): the file holds theirs whole, sensitive blocks too; elsewhere
        403, and the page says which command gives it. Logged, without its content."""
        typed = request.query.get("user", "")
        found = read_person(typed)
        if isinstance(found, str):
            return self._person_page(request, typed, status=400, problem=found)
        if not self.config.show_direct:
            counts = await self.person_data.counts(found.platform, found.user)
            return self._person_page(
                request, str(found), status=403, problem=EXPORT_HIDDEN, person=found, counts=counts
            )
        reply = await self.people.export_me(found.platform, found.user, True, "me")
        if reply.document is None:  # a refusal (asked as the person in a direct chat: none yet)
            return self._person_page(request, typed, status=400, problem=reply.text)
        log.info("%s exported the data of %s from the web page", self.actor, found)
        disposition = content_disposition_header("attachment", filename=reply.document.name)
        return web.Response(
            body=reply.document.data,
            content_type="application/json",
            charset="utf-8",
            headers={"Content-Disposition": disposition},
        )

    async def forget_form(self, request: web.Request) -> web.Response:
        """The confirmation of a forget: what it would remove from the person ?user=, in counts,
        that it cannot be undone, and the form that confirms it. Changes nothing."""
        typed = request.query.get("user", "")
        found = read_person(typed)
        if isinstance(found, str):
            return self._person_page(request, typed, status=400, problem=found)
        return await self._forget_page(request, found)

    async def forget_person(self, request: web.Request) -> web.Response:
        """Remove everything held about the person of the form, confirmed by its box, as
        `pinbot forget --user … --yes` does (PersonCommands.forget: blocks through the review,
        recorded as channel `forget`), then back to their page, which says what was removed,
        or why nothing was. Unconfirmed or mistyped: the page again (400), nothing changed.
        Logged, naming the person and how it went."""
        form = await request.post()
        typed = _text(form, "user")
        found = read_person(typed)
        if isinstance(found, str):
            return self._person_page(request, typed, status=400, problem=found)
        if _text(form, "confirm") != "yes":
            return await self._forget_page(request, found, status=400, problem=NOT_CONFIRMED)
        reply = await self.people.forget(found.platform, found.user)
        log.info("%s forgot %s from the web page: %s", self.actor, found, reply.outcome.value)
        # Said as `pinbot forget` says it: the reply speaks to the person, the page about them.
        said = reply.text.replace("about you", f"about {found}")
        kind = "done" if reply.outcome is Result.DONE else "refused"
        self._flash[request.cookies.get(SESSION_COOKIE, "")] = Flash(kind, said)
        raise web.HTTPSeeOther(found.page)

    def _person_page(
        self,
        request: web.Request,
        typed: str,
        *,
        status: int = 200,
        problem: str = "",
        person: Person | None = None,
        counts: dict[str, int] | None = None,
    ) -> web.Response:
        """The person page: the look-up form as typed, a problem, and a person's counts."""
        return self.render(
            request,
            "person.html",
            status=status,
            section="person",
            typed=typed,
            problem=problem,
            person=person,
            counts=counts or {},
            kinds=KINDS,
        )

    async def _forget_page(
        self, request: web.Request, person: Person, *, status: int = 200, problem: str = ""
    ) -> web.Response:
        """The confirmation page of forgetting person, with their counts as they are now."""
        counts = await self.person_data.counts(person.platform, person.user)
        return self.render(
            request,
            "forget.html",
            status=status,
            section="person",
            person=person,
            counts=counts,
            kinds=KINDS,
            problem=problem,
        )


def _raw(request: web.Request) -> bool:
    """Whether the operator opened the raw view: sensitive blocks as stored."""
    return request.query.get("raw") == "1"


def _text(form: Any, name: str) -> str:
    """A form field as text ('' when missing or not text)."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _timing(form: Any) -> tuple[tuple[str, ...] | None, Ends | None] | Refused:
    """A form's keywords (`when`, as `--when` takes them) and end (`until`, a date-time in UTC
    as `--until` takes it), each None where the form has none or holds it as it showed it
    (`when_shown`, `until_shown`: what the block had); empty (or '-') takes them away. What
    cannot be read is refused by the keyword or the end rule."""
    triggers: tuple[str, ...] | None = None
    ends: Ends | None = None
    when, until = _text(form, "when").strip(), _text(form, "until").strip()
    if "when" in form and when != _text(form, "when_shown").strip():
        keywords = parse_keywords(when) if when not in ("", "-") else []
        if isinstance(keywords, str):
            return refusal(Rule.TRIGGERS, problem=keywords)
        triggers = tuple(keywords)
    if "until" in form and until != _text(form, "until_shown").strip():
        read = parse_until(until) if until else Ends()
        if isinstance(read, str):
            return refusal(Rule.ENDS, problem=f"{read.split('; write')[0]}; {END_HINT}")
        ends = read
    return triggers, ends


def _whole_number(text: str) -> int | None:
    """text as a whole number, or None."""
    try:
        return int(text.strip())
    except ValueError:
        return None


def _page_of(scope: str) -> str:
    """The page a block's scope is shown on: its group's page, or the DM's own."""
    parsed = parse_scope(scope)
    return (parsed.group_key if parsed else None) or group_key_of(scope) or scope


def _every_day(
    per_day: list[tuple[str, UsageTotals]], now: datetime, days: int
) -> list[tuple[str, int]]:
    """(day, billed tokens) for each of the last days UTC days, zero where nothing was used."""
    used = {day: totals.billed_tokens for day, totals in per_day}
    first = now.date() - timedelta(days=days - 1)
    every = [(first + timedelta(days=n)).isoformat() for n in range(days)]
    return [(day, used.get(day, 0)) for day in every]
