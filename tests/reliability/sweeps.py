"""The SQLite-style sweeps: fail the N-th write syscall of a fixed workload, for N = 1, 2, ...
until the workload runs to its end without the fault firing. Shared by the tests and the soak."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import Reference, after_restart
from .faults import Fixture, Run, Said, check_complete, parse, run
from .workloads import Tick

MAX_N = 5000


@dataclass
class SweepResult:
    syscall: str
    action: str
    runs: int = 0
    fired: int = 0  # runs in which the fault was injected
    panics: int = 0
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.syscall}:{self.action}: {self.runs} runs, {self.fired} faults, {self.panics} panics, {len(self.failures)} failures"


def kill_sweep(fx: Fixture, ref: Reference, syscall: str, max_n: int = MAX_N) -> SweepResult:
    """SIGKILL at the N-th `syscall`: afterwards the state must be the acknowledged prefix, or
    that plus the in-flight step applied whole (never a part of one transaction)."""
    res = SweepResult(syscall, "SIGKILL")
    for n in range(1, max_n + 1):
        r = run(fx, f"{syscall}:signal=SIGKILL:when={n}")
        res.runs += 1
        said = parse(r.out)
        if not r.killed:
            if r.rc != 0 or not said.ended:
                res.failures.append(f"n={n}: not killed, yet exit {r.rc} without END")
            _check_state(res, n, r, {ref.after(len(ref.steps) - 1): "the whole workload"}, fx)
            res.failures += [f"n={n}: {p}" for p in check_complete(fx.workload, said)]
            return res
        res.fired += 1
        _check_state(res, n, r, ref.allowed(said), fx)
    res.failures.append(f"the workload never completed within {max_n} {syscall} calls")
    return res


def error_sweep(fx: Fixture, syscall: str, errno: str, max_n: int = MAX_N) -> SweepResult:
    """errno at the N-th `syscall`: the call it hits is never acknowledged; the process either
    carries on (later calls work) or, on an LMDB panic, exits 70 at once; after a restart the
    state is exactly the acknowledged calls, nothing lost and nothing extra."""
    res = SweepResult(syscall, errno)
    for n in range(1, max_n + 1):
        r = run(fx, f"{syscall}:error={errno}:when={n}", trace=(*_traced(syscall), "write"))
        res.runs += 1
        said = parse(r.out)
        if not r.injected:
            if r.rc != 0 or not said.ended:
                res.failures.append(f"n={n}: no fault, yet exit {r.rc} without END")
            return res
        res.fired += 1
        res.failures += [f"n={n}: {p}" for p in hit_was_refused(r, said, fx)]
        if said.panicked:
            res.panics += 1
            if r.rc != 70:
                res.failures.append(f"n={n}: panicked but exited {r.rc}, not 70")
        elif r.rc != 0 or not said.ended:
            res.failures.append(f"n={n}: exit {r.rc}, ended={said.ended} after a non-fatal error")
        else:
            res.failures += [f"n={n}: {p}" for p in check_complete(fx.workload, said)]
        skip = {k for k, o in said.answers.items() if o.kind == "err"}
        ref = Reference(fx.workload, skip)
        res.failures += [f"n={n}: {p}" for p in ref.mismatched_outcomes(said)]
        _check_state(res, n, r, ref.allowed(said), fx)
    res.failures.append(f"the workload never completed within {max_n} {syscall} calls")
    return res


def _traced(syscall: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(("fdatasync", "pwrite64", "writev", syscall)))


def _check_state(res: SweepResult, n: int, r: Run, allowed: dict[str, str], fx: Fixture) -> None:
    after = after_restart(r.data, fx.workload.module)
    res.failures += [f"n={n}: after restart: {p}" for p in after.problems]
    if after.state not in allowed:
        res.failures.append(f"n={n}: the state after restart is none of: {sorted(allowed.values())}; driver said {r.out.split()[-6:]}")


def hit_was_refused(r: Run, said: Said, fx: Fixture) -> list[str]:
    """The request in flight when the fault fired must not have been answered as a success.

    The trace interleaves the driver's stdout lines with the writer's syscalls in the order they
    happened; the call hit is the first of the current step not answered before the fault."""
    step, answered, fault_seen = -1, 0, False
    for line in r.trace.splitlines():
        if "(INJECTED)" in line:
            fault_seen = True
            break
        text = _stdout_text(line)
        if text is None:
            continue
        for out in text.split("\\n"):
            parts = out.split()
            if parts and parts[0] == "S":
                step, answered = int(parts[1]), 0
            elif parts and parts[0] in ("A", "N", "E"):
                answered += 1
    if not fault_seen or step < 0:
        return []  # the fault fired while opening or before the first call: no request was hit
    if isinstance(fx.workload.steps[step], Tick):
        return []  # a scheduled transaction, not a request; run_due retries it
    o = said.answers.get((step, answered))
    if o is not None and o.kind == "ack":
        return [f"step {step} unit {answered} was acknowledged although its commit failed"]
    return []


def _stdout_text(line: str) -> str | None:
    """The text of a `write(1, "...", n)` line of an strace log, else None."""
    marker = " write(1, \""
    at = line.find(marker)
    if at < 0:
        return None
    rest = line[at + len(marker) :]
    end = rest.find('", ')
    return rest[:end] if end >= 0 else None
