"""A call's way in, before the writer: the reducer as its caller may call it, the arguments
checked and encoded once, and the job handed to the writer (or, for a procedure, to the
procedure pool). `Database` keeps one and sends every call through it.

This is the fixed cost of every call, so the optional compiled build compiles it. Python values
whose types a parameter takes as they are (`ReducerDef.exact_types`: strings, ints, None, ...,
anything for `Any`) skip msgspec's conversion: it would return each of them unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from typing import Any, Final, NoReturn

import msgspec

from .. import codec
from ..errors import ArgumentError, CallError, LifecycleCall, NoSuchReducer
from ..module import Module
from ..schema import ReducerDef
from ..types import ConnectionId, Identity
from .jobs import CallJob, Job
from .writer import MAX_BATCH, Done, Outcome, Waiter, Writer

# Errors msgspec lets through for values it cannot take: a string with a lone surrogate cannot
# be UTF-8 (UnicodeEncodeError), an int past 64 bits cannot be MessagePack (OverflowError).
_BAD_VALUE: Final = (msgspec.MsgspecError, OverflowError, NotImplementedError, TypeError, UnicodeEncodeError)


class _Plan:
    """What `Calls.job` reads of a reducer's `ReducerDef`, as native attributes: the interpreted
    class's are each a generic attribute read (`client_callable` a property's frame), ~10 a call
    (docs/performance.md, "Fourteenth round"). Made on the reducer's first call; checked against
    the module's `ReducerDef` on every call, so a module changed since is planned again."""

    def __init__(self, r: ReducerDef) -> None:
        self.r = r
        self.client_callable = r.client_callable
        self.spread = r.spread
        self.params = len(r.params)
        self.exact_types = r.exact_types
        self.required = r.required
        self.defaults = r.defaults


class Calls:
    def __init__(self, module: Module, owner: Identity, writer: Writer, procedure_pool: Callable[[], Any]) -> None:
        self.module = module
        self.owner = owner
        self.writer = writer
        self._procedure_pool = procedure_pool  # made on first use (runtime/procedures.py)
        self._plans: dict[str, _Plan] = {}

    def reducer(self, name: str, sender: Identity | None = None) -> ReducerDef:
        """The reducer `name` as `sender` may call it: a client-callable one, or, for the owner
        (SpacetimeDB 2.x: private functions), a scheduled one too (its argument is a row of its
        table; the row is not looked up nor deleted). A lifecycle reducer is refused with
        LifecycleCall (400); anything else, NoSuchReducer (404). `sender` None: as a client."""
        return self._plan(name, sender).r

    def _plan(self, name: str, sender: Identity | None) -> _Plan:
        r = self.module.reducers.get(name)
        if r is None:
            self._refuse(name, None)
        p = self._plans.get(name)
        if p is None or p.r is not r:
            p = self._plans[name] = _Plan(r)
        if p.client_callable or (sender is not None and sender == self.owner):
            return p
        self._refuse(name, r)

    def _refuse(self, name: str, r: ReducerDef | None) -> NoReturn:
        if r is None:
            kind = self.module.lifecycle_kind(name)
            if kind is not None:
                raise LifecycleCall(kind)
        known = ", ".join(sorted(n for n, d in self.module.reducers.items() if d.client_callable)) or "none"
        raise NoSuchReducer(f"no such reducer: {name} (the module's reducers: {known})")

    def job(
        self, name: str, args: tuple[Any, ...], sender: object, connection_id: object,
        decoded: Any = None, typed: bool = False,
    ) -> CallJob:  # fmt: skip
        """The job of a call. `args` as Python values are checked against the reducer's types
        (`decoded`: the JSON decoder did); `typed` ones are taken as they are (`submit_typed`)
        when they hold every parameter. Either way they are encoded here once, for the commit log
        (a MessagePack array in parameter order: the bytes `r.args_type` encodes to), and handed
        to the reducer as a tuple (a typed spread reducer's Struct: as it is). `sender` and
        `connection_id` are the caller's, checked here (typed `object`: compiled, a parameter
        typed Identity would refuse anything else with a TypeError of its own)."""
        p = self._plan(name, sender if isinstance(sender, Identity) else None)
        r = p.r
        call_args = args
        if p.spread is not None and len(args) == 1 and type(args[0]) is p.spread:
            args = msgspec.structs.astuple(args[0])  # one instance of a spread reducer's Struct
        if not typed or len(args) != p.params:  # fewer take the defaults, more are refused: the check's work
            as_is = None if decoded is not None else _as_is(p, args)
            if as_is is not None:
                args = call_args = as_is
            else:
                if decoded is None:
                    try:
                        decoded = codec.convert(list(args), r.args_type)
                    except msgspec.ValidationError as e:
                        raise ArgumentError(r.explain(e)) from None
                    except RecursionError:
                        raise ArgumentError(f"{name}: the arguments are nested too deeply") from None
                    except _BAD_VALUE as e:
                        raise ArgumentError(f"{name}: {e}") from None
                args = call_args = msgspec.structs.astuple(decoded)
        if not isinstance(sender, Identity):
            raise ArgumentError("sender must be an Identity")
        if connection_id is not None and not isinstance(connection_id, ConnectionId):
            raise ArgumentError("connection_id must be a ConnectionId or None")
        return CallJob(
            kind="call",
            reducer=name,
            sender=sender,
            connection_id=connection_id,
            args_bytes=encode_args(name, args),
            reducer_def=r,
            args=call_args,
        )

    # --- handing a job over --------------------------------------------------------------------

    def procedure(self, job: Job) -> Future[Any] | None:
        """What every way in checks first: a reducer calling back in is refused, and a
        procedure's call goes to the procedures' pool (its future); None: a job for the writer."""
        self._refuse_reentry()
        if _is_procedure(job):
            assert isinstance(job, CallJob) and job.reducer_def is not None
            pool = self._procedure_pool()
            return pool.submit(  # type: ignore[no-any-return]
                job.reducer_def, job.args, sender=job.sender, connection_id=job.connection_id, args_bytes=job.args_bytes
            )
        return None

    def _refuse_reentry(self) -> None:
        if self.writer.running_here():
            raise CallError("a reducer cannot call db.call(); call the other reducer function directly")

    def submit(self, job: Job) -> Future[Any]:
        return self.procedure(job) or self.writer.submit(job)

    def submit_to(self, job: Job, outcome: Outcome) -> None:
        """`submit`, settling `outcome` instead of returning a future."""
        fut = self.procedure(job)
        if fut is None:
            self.writer.submit_to(job, outcome)
        else:
            fut.add_done_callback(lambda done: pass_on(done, outcome))

    def run(self, job: Job) -> Future[Any] | Waiter | Done:
        """As `submit`, for a caller that waits for the result: run here if the writer is idle."""
        return self.procedure(job) or self.writer.run(job)

    def queue(self, job: Job) -> Future[Any] | Waiter:
        """As `submit`, for a caller that waits for the result (no callbacks)."""
        return self.procedure(job) or self.writer.queue(job)

    def run_many(self, jobs: list[Job]) -> list[Future[Any] | Waiter | Done]:
        """As `run` for jobs meant to share commits (`call_many`): run here when the writer is
        idle, `MAX_BATCH` to a batch, each batch one commit, else queued together. A list with a
        procedure's call in it goes job by job (`queue`)."""
        if any(_is_procedure(job) for job in jobs):
            return [self.queue(job) for job in jobs]
        self._refuse_reentry()
        outcomes: list[Future[Any] | Waiter | Done] = []
        for start in range(0, len(jobs), MAX_BATCH):
            outcomes.extend(self.writer.run_many(jobs[start : start + MAX_BATCH]))
        return outcomes

    def call(self, name: str, args: tuple[Any, ...], sender: object, connection_id: object) -> Any:
        """`Database.call`: the job, run here or queued, and its result once committed."""
        return self.run(self.job(name, args, sender, connection_id)).result()


def pass_on(done: Future[Any], outcome: Outcome) -> None:
    """Settle `outcome` as the future `done` was settled."""
    if done.cancelled():
        outcome.set_exception(CancelledError())
        return
    error = done.exception()
    if error is None:
        outcome.set_result(done.result())
    else:
        outcome.set_exception(error)


def _is_procedure(job: Job) -> bool:
    """Whether the job is a call of a procedure (it runs on the procedure pool, not the writer)."""
    return isinstance(job, CallJob) and job.reducer_def is not None and job.reducer_def.procedure


def _as_is(r: _Plan, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """`args` with the defaults of the parameters not given, if msgspec's conversion would
    return every value unchanged; None if they need it (or are too few or too many: its error)."""
    exact = r.exact_types
    n = len(args)
    if n < r.required or n > len(exact) or (n < len(exact) and r.defaults is None):
        return None
    for i in range(n):
        types = exact[i]
        if types is not None and type(args[i]) not in types:
            return None
    if n == len(exact):
        return args
    assert r.defaults is not None
    return args + r.defaults[n - r.required :]


def encode_args(reducer: str, args: Any) -> bytes:
    """The arguments' bytes for the commit log. JSON decodes integers of any size; MessagePack
    stores 64 bits at most. A Python caller can pass any object where a reducer takes `Any`; one
    msgpack cannot store is the caller's error."""
    try:
        return codec.msgpack_encoder.encode(args)
    except RecursionError:
        raise ArgumentError(f"{reducer}: the arguments are nested too deeply") from None
    except _BAD_VALUE as e:
        raise ArgumentError(f"{reducer}: {e}") from None
