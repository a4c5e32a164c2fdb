"""Instructions per reducer call of the retry lifecycle, counted by valgrind (callgrind).

Wall-clock and even CPU-time figures move with whatever else runs on the machine; an instruction
count does not, so this is the figure to compare before and after a change to the hot path:

    python bench/instructions.py            # ~2 minutes: two runs under valgrind
    python bench/instructions.py --tree DIR # the same for another checkout (a baseline)
    python bench/instructions.py --empty    # the runtime's fixed cost: a reducer that does nothing
    python bench/instructions.py --subscribers 100   # with 100 live subscribers the calls never touch
    python bench/instructions.py --batched  # the lifecycle through call_many of 100 (group commit)
    python bench/instructions.py --http     # the lifecycle's requests through the HTTP server's path
    python bench/instructions.py --http --no-lanes   # the same without the job routes' lanes (the ASGI way)

Each run's string hashes are seeded alike (PYTHONHASHSEED=0, unless set): a count is then the
same to a few instructions from run to run (~1,000 apart with random seeds).

It runs N and N + 1000 lifecycles (enqueue, claim, complete; fsync off) and divides the
difference by the 3,000 calls, so start-up and imports cancel out. N is 1,000 unless `--base` says
otherwise: the attempt history's default cap, so that each counted completion also trims the
history, as in a queue that has run a while (before the twenty-fourth round N was 300, and only
300 of the 1,000 counted lifecycles trimmed: docs/performance.md). `--empty` does the same with
3 calls of an empty reducer per round (no arguments, no rows, so no commit record).
`--batched` runs each step of 100 lifecycles as one `call_many` (one batch, one commit, each call
in a nested transaction: what group commit costs a call). `--subscribers N` runs the lifecycle
with N inline subscribers of `SELECT * FROM retry_worker` (a table the lifecycle never writes):
what live subscriptions cost a call that concerns none of them (issue 15: at most 5% more than
with nothing subscribed). Every thread's instructions count, the subscriptions' own included.
`--http` runs the lifecycle as seed 000's three requests through `serve`'s protocol and app over
an in-memory transport (bench/http_drive.py), one at a time: instructions per request, the
writer thread's included, the kernel's and a load generator's not.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

_LIFECYCLES = """
import sys, tempfile
from stdbmod import Database, Identity
from stdbmod.retry import create_retry_module
owner = Identity.from_claims("bench", "owner")
db = Database.create(tempfile.mkdtemp(), create_retry_module().module, owner=owner, durable=False)
subs = [db.subscribe(["SELECT * FROM retry_worker"], lambda e: None, sender=owner, inline=True) for _ in range(int(sys.argv[2]))]
for i in range(int(sys.argv[1])):
    db.call("enqueue", "email", None, {"i": i}, sender=owner)
    c = db.call("claim", None, "w", sender=owner)
    db.call("complete", c.id, {"ok": True}, sender=owner)
for s in subs:
    s.unsubscribe()
db.close()
"""

_BATCHED = """
import sys, tempfile
from stdbmod import Database, Identity
from stdbmod.retry import create_retry_module
owner = Identity.from_claims("bench", "owner")
db = Database.create(tempfile.mkdtemp(), create_retry_module().module, owner=owner, durable=False)
for b in range(int(sys.argv[1]) // 100):
    db.call_many([("enqueue", ("email", None, {"i": i}), owner) for i in range(100)])
    tasks = db.call_many([("claim", (None, "w"), owner) for i in range(100)])
    db.call_many([("complete", (t.id, {"ok": True}), owner) for t in tasks])
db.close()
"""

_EMPTY = """
import sys, tempfile
from stdbmod import Database, Identity, Module
mod = Module("empty")
@mod.reducer
def noop(ctx):
    pass
owner = Identity.from_claims("bench", "owner")
db = Database.create(tempfile.mkdtemp(), mod, owner=owner, durable=False)
for i in range(int(sys.argv[1])):
    db.call("noop", sender=owner)
    db.call("noop", sender=owner)
    db.call("noop", sender=owner)
db.close()
"""


def counted(args: list[str], tree: str | None = None) -> int:
    """The instructions of `python *args` (every thread's), counted by callgrind; `tree` on
    PYTHONPATH. One hash seed: str hashes decide where dict entries land and so how many probes
    a lookup takes; seeded at random, counts of one tree moved by ~1,000 between runs."""
    env = {"PYTHONHASHSEED": "0", **os.environ}
    if tree is not None:
        env["PYTHONPATH"] = os.path.abspath(tree)
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={os.path.join(d, 'cg.out')}", sys.executable, *args],
            env=env, capture_output=True, text=True, check=True,
        ).stderr
    m = re.search(r"Collected : (\d+)", out)
    if m is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out[-2000:]}")
    return int(m.group(1))


def instructions(tree: str, lifecycles: int, program: str = _LIFECYCLES, subscribers: int = 0) -> int:
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "lifecycles.py")
        with open(script, "w") as f:
            f.write(program)
        return counted([script, str(lifecycles), str(subscribers)], tree)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), help="checkout whose stdbmod to measure")
    p.add_argument(
        "--base", type=int, default=1000,
        help="lifecycles of the first run (start-up cost); the default fills the retry history's cap (1,000), so each counted one trims it",
    )
    p.add_argument("--empty", action="store_true", help="an empty reducer instead of the retry lifecycle")
    p.add_argument("--subscribers", type=int, default=0, help="live subscribers of a table the lifecycle never writes")
    p.add_argument("--batched", action="store_true", help="the lifecycle through call_many of 100 (group commit)")
    p.add_argument("--http", action="store_true", help="the lifecycle's requests through the HTTP server's path (bench/http_drive.py)")
    p.add_argument("--no-lanes", action="store_true", help="with --http: every request the ASGI way, without the job routes' lanes")
    a = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    if sum((a.empty, a.batched, a.subscribers > 0, a.http)) > 1:
        p.error("--empty, --batched, --subscribers and --http are separate measurements")
    if a.no_lanes and not a.http:
        p.error("--no-lanes is a way of --http")
    if a.http:
        # run as a script, so that stdbmod comes from the tree (PYTHONPATH), not from where this runs
        drive = os.path.join(os.path.dirname(os.path.abspath(__file__)), "http_drive.py")
        flags = ["--no-lanes"] if a.no_lanes else []
        first, second = counted([drive, str(a.base), *flags], a.tree), counted([drive, str(a.base + 1000), *flags], a.tree)
        way = ", the ASGI way" if a.no_lanes else ""
        print(f"{(second - first) / 3000:,.0f} instructions per request (retry lifecycle over HTTP{way}, one connection, fsync off; {a.tree})")
        return 0
    program, what = (_EMPTY, "empty reducer") if a.empty else (_LIFECYCLES, "retry lifecycle")
    if a.batched:
        program, what = _BATCHED, "retry lifecycle in call_many batches of 100"
    if a.subscribers:
        what += f", {a.subscribers} live subscribers"
    first = instructions(a.tree, a.base, program, a.subscribers)
    second = instructions(a.tree, a.base + 1000, program, a.subscribers)
    print(f"{(second - first) / 3000:,.0f} instructions per reducer call ({what}, fsync off; {a.tree})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
