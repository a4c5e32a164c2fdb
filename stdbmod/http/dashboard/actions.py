"""The dashboard's actions: each a form POST carrying the session's CSRF token, answered by a
reducer call as the signed-in identity (the module checks the admin role inside the transaction)
and a redirect back with what happened. The pages confirm each action before sending it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from ...errors import StdbError
from ...retry.triage import BulkAction, TriageFilter, TriageOp
from ...types import Identity
from ..routing import JOB_ID
from .sessions import PATH
from .web import form, local_path, redirect

if TYPE_CHECKING:
    from .site import Dashboard

Args = Callable[[Request, dict[str, str]], tuple[Any, ...]]
Handler = Callable[[Request], Awaitable[Response]]


def _job(request: Request, fields: dict[str, str]) -> tuple[Any, ...]:
    return (request.path_params["job_id"],)


def _queue(request: Request, fields: dict[str, str]) -> tuple[Any, ...]:
    queue = fields.get("queue", "")
    if not queue:
        raise ValueError("no queue named")
    return (queue,)


def _identity(request: Request, fields: dict[str, str]) -> tuple[Any, ...]:
    text = fields.get("identity", "").strip()
    try:
        return (Identity.from_hex(text),)
    except ValueError as e:
        raise ValueError(f"{text!r} is not an identity: {e}") from None


class Actions:
    def __init__(self, site: Dashboard) -> None:
        self.site = site

    def routes(self) -> list[tuple[str, Handler, list[str]]]:
        job = "/jobs/" + JOB_ID
        table: list[tuple[str, str, Args, str]] = [
            (job + "/requeue", "requeue", _job, "Job {0} is queued again, attempts reset."),
            (job + "/delete", "delete_task", _job, "Job {0} is deleted."),
            (job + "/run_now", "run_now", _job, "Job {0} is due now."),
            (job + "/cancel", "cancel", lambda r, f: (*_job(r, f), "cancelled from the dashboard"), "Job {0} is cancelled (dead)."),
            ("/queues/pause", "pause_queue", _queue, "Queue {0} is paused: nothing is handed out until it resumes."),
            ("/queues/resume", "resume_queue", _queue, "Queue {0} is running again."),
            ("/admins/add", "add_admin", _identity, "{0} is an admin."),
            ("/admins/remove", "remove_admin", _identity, "{0} is no longer an admin."),
            ("/workers/grant", "grant_worker", _identity, "{0} has the worker role."),
            ("/workers/revoke", "revoke_worker", _identity, "{0} no longer has the worker role."),
        ]
        out: list[tuple[str, Handler, list[str]]] = [(path, self._action(reducer, args, done), ["POST"]) for path, reducer, args, done in table]
        out.append(("/workers/new", self.new_worker, ["POST"]))
        out.append(("/dead/bulk", self.bulk, ["POST"]))
        return out

    async def bulk(self, request: Request) -> Response:
        """Requeue or delete a dead-letter group (the module's bulk_dlq: the first batch now, the
        rest in batches of its own)."""

        async def act(fields: dict[str, str]) -> str:
            try:
                action = BulkAction(fields.get("action", ""))
            except ValueError:
                raise ValueError("action must be requeue or delete") from None
            where = TriageFilter(fingerprint=fields.get("fingerprint", ""))
            ctx = self.site.ctx
            op: TriageOp = await ctx.call(ctx.db, "bulk_dlq", action, where, sender=await self._who(request))
            verb = "requeued" if action is BulkAction.REQUEUE else "deleted"
            rest = "done" if op.done else "the rest follows in batches"
            return f"Bulk {action.value} #{op.id} of group {where.fingerprint or '(none)'}: {op.processed} {verb}, {rest}."

        return await self._run(request, "bulk_dlq", act)

    def _action(self, reducer: str, args_of: Args, done: str) -> Handler:
        async def handle(request: Request) -> Response:
            async def act(fields: dict[str, str]) -> str:
                args = args_of(request, fields)
                await self.site.ctx.call(self.site.ctx.db, reducer, *args, sender=await self._who(request))
                return done.format(*args)

            return await self._run(request, reducer, act)

        return handle

    async def new_worker(self, request: Request) -> Response:
        """A new identity with the worker role; its token is shown once."""

        async def act(fields: dict[str, str]) -> str:
            ctx = self.site.ctx
            identity, token = ctx.key.mint(expires_in=ctx.token_ttl)
            await ctx.call(ctx.db, "grant_worker", identity, sender=await self._who(request))
            return f"New worker {identity}: its token (shown only now) is {token}"

        return await self._run(request, "grant_worker", act)

    async def _who(self, request: Request) -> Identity:
        session = await self.site.session(request)
        assert session is not None  # `_run` checked
        return session.identity

    async def _run(self, request: Request, reducer: str, act: Callable[[dict[str, str]], Awaitable[str]]) -> Response:
        session = await self.site.session(request)
        if session is None:
            return redirect(PATH + "/login")
        fields = await form(request)
        if not self.site.forms.csrf_ok(session, fields.get("csrf")):
            return await self.site.csrf_refused(request, session)
        try:
            kind, text = "ok", await act(fields)
        except ValueError as e:
            kind, text = "error", str(e)
        except StdbError as e:
            kind, text = "error", f"{reducer} refused: {e}"
        await self.site.desk.flash(session, kind, text)
        return redirect(local_path(fields.get("next")))
