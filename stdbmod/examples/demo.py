"""A short tour of the runtime with the bank module: `python -m stdbmod.examples.demo [DIR]`."""

from __future__ import annotations

import sys
import tempfile

from stdbmod import Database, Identity, ManualClock, SenderError
from stdbmod.examples.bank import bank
from stdbmod.runtime import apply_changes


def main(argv: list[str]) -> int:
    path = argv[0] if argv else tempfile.mkdtemp(prefix="stdbmod-demo-")
    clock = ManualClock()
    banker, alice, bob = (Identity.from_claims("demo", n) for n in ("banker", "alice", "bob"))
    db = Database.create(path, bank, owner=banker, clock=clock)
    print(f"published {db.name} at {path}: identity {db.identity}, owner {db.owner}")
    db.call("open_account", 100, sender=alice)
    db.call("open_account", 20, sender=bob)
    db.call("transfer", 2, 30, sender=alice)
    try:
        db.call("transfer", 2, 1_000, sender=alice)
    except SenderError as e:
        print(f"refused: {e}")
    db.call("schedule_interest", 10, 60, False, sender=banker)
    clock.advance(60)
    print(f"scheduled reducers fired: {db.run_due()}")
    with db.read() as view:
        for account in view.db.account.iter():
            print(f"account {account.id}: {account.balance}")
    for record in db.commit_log():
        print(f"log {record.offset}: {record.kind} {record.reducer} ({sum(len(c.inserts) for c in record.changes)} rows in)")
    replica = Database.create(tempfile.mkdtemp(), bank, owner=banker, identity=db.identity, run_init=False)
    apply_changes(replica, db.commit_log())
    print(f"replayed the log: state hashes {'match' if replica.state_hash() == db.state_hash() else 'DIFFER'}")
    replica.close()
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
