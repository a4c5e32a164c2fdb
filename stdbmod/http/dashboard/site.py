"""`Dashboard`: the admin web dashboard at /dashboard, its pages and its sign-in.

Who sees what: a request's session (sessions.py) says who the browser is; every page then reads
through `reads`, which checks in its read snapshot that this identity is an admin and reads the
page's data from that same snapshot; every action is a reducer call as that identity, which the
task-retry module checks inside its transaction. A signed-in identity that is not (or no longer)
an admin gets the "not allowed" page and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from ...errors import StdbError
from ...local.tokens import InvalidToken
from ...retry import triage
from ...retry.tables import TaskStatus
from ...types import Identity
from ..context import ServerContext
from ..errors import HttpError
from ..metrics_access import is_admin_now
from ..metrics_feed import Feed
from ..metrics_tasks import Counts, QueueCounts
from ..routing import JOB_ID
from . import reads
from .actions import Actions
from .desk import Desk, LocalDesk
from .live import LiveFeed, serve_socket
from .sessions import COOKIE, LOGIN_COOKIE, LOGIN_SECONDS, PATH, Session, Sessions
from .tickets import BadTicket
from .web import Web, form, local_path, parse_time, redirect, secure

Work = Callable[[Identity], dict[str, Any]]
GROUPS = 20  # dead-letter groups the page shows, largest first
FINGERPRINT = re.compile(r"(?:[0-9a-f]{16})?")


class Dashboard:
    def __init__(self, ctx: ServerContext, feed: Feed, counts: Counts) -> None:
        self.ctx = ctx
        self.counts = counts
        # sessions, used tickets, throughput: this process's own, unless an HTTP front of
        # --workers N points it at the writer's (front.py)
        self.desk: Desk = LocalDesk(ctx.key, feed)
        self.forms = Sessions(ctx.key)  # the sign-in form's and CSRF checks only: keyed, not stored
        self.web = Web()
        self.actions = Actions(self)
        self.live_feed = LiveFeed()

    def routes(self) -> list[BaseRoute]:
        get, post = ["GET"], ["POST"]
        pages: list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]] = [
            ("", self.overview, get),
            ("/", self.overview, get),
            ("/jobs", self.jobs, get),
            ("/jobs/" + JOB_ID, self.job, get),
            ("/dead", self.dead, get),
            ("/dead/group", self.dead_group, get),
            ("/roles", self.roles, get),
            ("/live", self.live, get),
            ("/login", self.login_page, get),
            ("/login", self.login, post),
            ("/logout", self.logout, post),
            ("/static/{name}", self.static, get),
            *self.actions.routes(),
        ]
        by_path: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {}
        for path, handler, methods in pages:
            for m in methods:
                by_path.setdefault(PATH + path, {})[m] = handler
        routes: list[BaseRoute] = [Route(path, _dispatch(handlers), methods=list(handlers), include_in_schema=False) for path, handlers in by_path.items()]
        return [*routes, WebSocketRoute(PATH + "/live/socket", self.live_socket)]

    # --- sessions -------------------------------------------------------------------------------

    async def session(self, request: Request) -> Session | None:
        return await self.desk.session(request.cookies.get(COOKIE))

    async def base(self, request: Request, session: Session | None, **values: Any) -> dict[str, Any]:
        """What every page's template gets."""
        return {
            "request": request,
            "session": session,
            "csrf": session.csrf if session is not None else "",
            "flashes": await self.desk.take_flashes(session) if session is not None else [],
            "db_name": self.ctx.db.name,
            "path": request.url.path,
            "params": dict(request.query_params),
            **values,
        }

    async def page(self, request: Request, template: str, work: Work, title: str) -> Response:
        """A signed-in page: `work(identity)` reads its values (off the event loop), checking
        the admin role in its snapshot."""
        session = await self.session(request)
        if session is None:
            return redirect(PATH + "/login" + _next(request))
        try:
            values = await run_in_threadpool(self._read, work, session.identity)
        except reads.NotAllowed:
            return await self.not_allowed(request, session)
        except reads.NoTasks as e:
            return self.web.render(request, "message.html", await self.base(request, session, title="No task-retry module", message=str(e)), 404)
        except (ValueError, HttpError) as e:
            status, message = (e.status_code, e.message) if isinstance(e, HttpError) else (400, str(e))
            title = "Not found" if status == 404 else "Bad request"
            return self.web.render(request, "message.html", await self.base(request, session, title=title, message=message), status)
        return self.web.render(request, template, await self.base(request, session, title=title, **values))

    def _read(self, work: Work, who: Identity) -> dict[str, Any]:
        """`work`'s values and the page's version: the commit log's end (every node's commits),
        seen before the read, so never newer than what the page shows (the live poll re-reads
        it once too often at worst, never once too few)."""
        version = self.ctx.db.commit_log_end()
        return {"version": version, **work(who)}

    async def not_allowed(self, request: Request, session: Session | None, identity: Identity | None = None) -> Response:
        who = identity or (session.identity if session is not None else None)
        return self.web.render(request, "not_allowed.html", await self.base(request, session, title="Not allowed", who=who), 403)

    # --- pages ----------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        def work(who: Identity) -> dict[str, Any]:
            controls = reads.check(self.ctx.db, who)
            snap = self.counts.get(self.ctx.db, self.ctx.db.commit_log_end())
            # a queue paused or limited before it had a task is shown too, with no counts
            counted = {q.queue for q in snap.queues}
            zero = dict.fromkeys(snap.totals(), 0)
            queues = [*snap.queues, *(QueueCounts(name, dict(zero), 0, None) for name in sorted(controls) if name not in counted)]
            spark = self.desk.throughput([q.queue for q in queues], snap.taken_micros)
            # The page's version is its counts': a shared snapshot older than the newest commit
            # makes the page poll, and re-read, until a newer one is taken.
            return {
                "snap": snap, "queues": queues, "controls": controls, "totals": snap.totals(), "throughput": spark,
                "now": snap.taken_micros // 1000, "version": snap.offset,
            }

        return await self.page(request, "overview.html", work, "Overview")

    async def jobs(self, request: Request) -> Response:
        p = request.query_params

        def work(who: Identity) -> dict[str, Any]:
            f = job_filter(p.get("status"), p.get("queue"), p.get("job_type"), p.get("since"), p.get("until"), p.get("q"))
            before = reads.Cursor.parse(p["before"]) if p.get("before") else None
            page = reads.jobs(self.ctx.db, who, f, before)
            return {"page": page, "filter": f, "statuses": [s.value for s in TaskStatus], "budget": reads.BUDGET, "now": self._now(), "dead": False}

        return await self.page(request, "jobs.html", work, "Jobs")

    async def job(self, request: Request) -> Response:
        job_id: int = request.path_params["job_id"]

        def work(who: Identity) -> dict[str, Any]:
            found = reads.job(self.ctx.db, who, job_id) if job_id < 2**63 else None
            if found is None:
                raise HttpError(404, f"no job {job_id}")
            return {"job": found.task, "history": found.history, "now": self._now()}

        return await self.page(request, "job.html", work, f"Job {job_id}")

    async def dead(self, request: Request) -> Response:
        p = request.query_params

        def work(who: Identity) -> dict[str, Any]:
            f = job_filter("dead", p.get("queue"), p.get("job_type"), None, None, p.get("q"))
            before = reads.Cursor.parse(p["before"]) if p.get("before") else None
            reads.check(self.ctx.db, who)  # a non-admin gets the "not allowed" page, as on every page
            groups = triage.dlq_groups(self.ctx.db, who, queue=f.queue, job_type=f.job_type, limit=GROUPS)
            return {
                "page": reads.jobs(self.ctx.db, who, f, before), "groups": groups, "filter": f, "budget": reads.BUDGET,
                "now": self._now(), "dead": True,
            }

        return await self.page(request, "jobs.html", work, "Dead letters")

    async def dead_group(self, request: Request) -> Response:
        """A group's dry run: how many dead jobs a bulk action on it would take now, and the first
        of them (a read), with the bulk actions to confirm."""
        fp = request.query_params.get("fingerprint", "")
        if not FINGERPRINT.fullmatch(fp):
            raise HttpError(400, "fingerprint must be 16 hex digits, or empty for the jobs that died without one")

        def work(who: Identity) -> dict[str, Any]:
            reads.check(self.ctx.db, who)
            where = triage.TriageFilter(fingerprint=fp)
            return {"preview": triage.preview(self.ctx.db, who, where), "fingerprint": fp, "now": self._now()}

        return await self.page(request, "dead_group.html", work, "Dead-letter group: dry run")

    async def roles(self, request: Request) -> Response:
        def work(who: Identity) -> dict[str, Any]:
            return {"roles": reads.roles(self.ctx.db, who), "me": who, "now": self._now()}

        return await self.page(request, "roles.html", work, "Admins and workers")

    async def live(self, request: Request) -> Response:
        """The live parts' poll: the commit log's end (a page re-reads itself when it moved;
        on PostgreSQL it moves with every node's commits). An admin's session only."""
        session = await self.session(request)
        if session is None:
            return secure(JSONResponse({"error": "not signed in"}, 401))
        db = self.ctx.db
        if not await run_in_threadpool(is_admin_now, db, session.identity):
            return secure(JSONResponse({"error": "not allowed"}, 403))
        return secure(JSONResponse({"version": await run_in_threadpool(db.commit_log_end)}))

    async def live_socket(self, ws: WebSocket) -> None:
        """The live parts' push: the commit log's end whenever a commit lands (live.py)."""
        await serve_socket(ws, self.ctx.db, self.desk, self.live_feed)

    async def static(self, request: Request) -> Response:
        return self.web.static(request.path_params["name"])

    def _now(self) -> int:
        return self.ctx.db.clock.now().micros // 1000

    # --- signing in and out ---------------------------------------------------------------------

    async def login_page(self, request: Request, error: str | None = None, status: int = 200) -> Response:
        if error is None and await self.session(request) is not None:
            return redirect(local_path(request.query_params.get("next")))
        ticket = request.query_params.get("ticket")
        ticket_for: Identity | None = None
        if ticket and error is None:
            try:
                ticket_for = await self.desk.ticket_for(ticket)
            except BadTicket as e:
                error, ticket, status = str(e), None, 400
        nonce, token = self.forms.signin_pair()
        values = await self.base(
            request, None, title="Sign in", error=error, ticket=ticket, ticket_for=ticket_for, signin=token,
            next=local_path(request.query_params.get("next")),
        )
        response = self.web.render(request, "login.html", values, status)
        response.set_cookie(LOGIN_COOKIE, nonce, max_age=LOGIN_SECONDS, path=PATH, httponly=True, samesite="strict", secure=_https(request))
        return response

    async def login(self, request: Request) -> Response:
        fields = await form(request)
        if not self.forms.signin_ok(request.cookies.get(LOGIN_COOKIE), fields.get("signin")):
            return await self.login_page(request, "The sign-in form expired or did not come from this server; try again.", 403)
        try:
            if fields.get("ticket"):
                who = await self.desk.redeem(fields["ticket"])
            else:
                token = fields.get("token", "").strip()
                if token.lower().startswith("bearer "):
                    token = token[7:].strip()
                who = self.ctx.tokens.identity(token)
        except (BadTicket, InvalidToken) as e:
            return await self.login_page(request, str(e), 400 if isinstance(e, BadTicket) else 401)
        if not await run_in_threadpool(is_admin_now, self.ctx.db, who):
            response = await self.not_allowed(request, None, who)
            response.delete_cookie(LOGIN_COOKIE, path=PATH, httponly=True, samesite="strict")
            return response
        cookie = await self.desk.sign_in(who)
        response = redirect(local_path(fields.get("next")))
        response.set_cookie(
            COOKIE, cookie, max_age=int(self.desk.ttl), path=PATH, httponly=True, samesite="strict", secure=_https(request)
        )
        response.delete_cookie(LOGIN_COOKIE, path=PATH, httponly=True, samesite="strict")
        return response

    async def logout(self, request: Request) -> Response:
        session = await self.session(request)
        fields = await form(request)
        if session is not None:
            if not self.forms.csrf_ok(session, fields.get("csrf")):
                return await self.csrf_refused(request, session)
            await self.desk.sign_out(session)
        response = redirect(PATH + "/login")
        response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict")
        return response

    async def csrf_refused(self, request: Request, session: Session) -> Response:
        message = "This form's CSRF token is missing or wrong (an old page, or a form from another site): nothing was done. Reload the page and try again."
        return self.web.render(request, "message.html", await self.base(request, session, title="Refused", message=message), 403)


def job_filter(status: str | None, queue: str | None, job_type: str | None, since: str | None, until: str | None, search: str | None) -> reads.JobFilter:
    try:
        st = TaskStatus(status) if status else None
    except ValueError:
        raise HttpError(400, f"no such status: {status!r}") from None
    if search is not None and len(search) > reads.MAX_SEARCH:
        raise HttpError(400, f"the search is longer than {reads.MAX_SEARCH} characters")
    return reads.JobFilter(st, queue or None, job_type or None, parse_time(since), parse_time(until), search or None)


def _next(request: Request) -> str:
    target = request.url.path + (("?" + request.url.query) if request.url.query else "")
    return "?" + urlencode({"next": target}) if target not in (PATH, PATH + "/") else ""


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


def _dispatch(handlers: dict[str, Callable[[Request], Awaitable[Response]]]) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            return await handlers["GET" if request.method == "HEAD" else request.method](request)
        except StdbError as e:
            raise HttpError(e.status_code if 400 <= e.status_code < 500 else 500, str(e)) from None

    return handle
