"""Online backup: a compacted copy taken under load opens, verifies, and holds everything
acknowledged before the copy began (and is one consistent state: a prefix of the history)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from click.testing import CliRunner

from stdbmod import Database
from stdbmod.cli.backup import backup_command
from stdbmod.retry import create_retry_module

from .checks import Reference, after_restart, log_length, state_at
from .faults import driver_cmd, env, parse
from .workloads import OWNER, W1, generate_retry, make_module, save


def test_backup_under_load_holds_every_earlier_acknowledgement(tmp_path: Path) -> None:
    rm = create_retry_module()
    db = Database.create(tmp_path / "live", rm.module, owner=OWNER)
    db.call("grant_worker", W1, sender=OWNER)
    acked: list[int] = []
    stop = threading.Event()
    some = threading.Event()

    def write(k: int) -> None:
        i = 0
        while not stop.is_set():
            t = db.call("enqueue", "job", None, {"k": k, "i": i, "pad": "p" * 500}, None, None, None, 0, f"{k}-{i}", sender=W1)
            acked.append(t.id)
            i += 1
            if len(acked) >= 200:
                some.set()

    writers = [threading.Thread(target=write, args=(k,)) for k in range(3)]
    for t in writers:
        t.start()
    try:
        assert some.wait(60)
        before = set(acked)
        db.backup(tmp_path / "copy")
        after_copy = len(acked)
    finally:
        stop.set()
        for t in writers:
            t.join()
    everything = set(acked)
    db.close()
    assert after_copy > len(before) or len(everything) > len(before)  # the writers kept going

    check = after_restart(tmp_path / "copy", rm.module)
    assert check.problems == []
    with Database.open(tmp_path / "copy", rm.module) as copy:
        with copy.read() as v:
            ids = {t.id for t in v.db.task.iter()}
    assert before <= ids, f"{len(before - ids)} acknowledged tasks are missing from the copy"
    assert ids <= everything
    assert ids == set(range(1, len(ids) + 1))  # a prefix: the copy is one committed state


def test_cli_backup_of_a_database_another_process_is_writing(tmp_path: Path) -> None:
    """The writer is a separate process with a small map that grows while the copy is made."""
    w = generate_retry(1000, seed=7)
    wfile = save(w, tmp_path / "workload.json")
    data = tmp_path / "live"
    small = ("--map-size", str(1 << 20))
    subprocess.run(driver_cmd(data, wfile, "--setup", *small), env=env(), check=True, timeout=120)
    proc = subprocess.Popen(driver_cmd(data, wfile, *small), env=env(), stdout=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        answers = 0
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            answers += line[:1] in "AN"
            if answers >= 300:
                break
        said_before = parse("\n".join(seen))
        result = CliRunner().invoke(backup_command, ["--data", str(data), str(tmp_path / "copy")])
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert result.exit_code == 0, result.output
    assert "verified" in result.output
    assert parse("\n".join(seen) + "\n" + rest).ended, "the writer did not finish its workload"

    check = after_restart(tmp_path / "copy", "retry")
    assert check.problems == []
    ref = Reference(w, hashes=False)
    module = make_module("retry")
    with Database.open(tmp_path / "copy", module) as copy:
        copied = log_length(copy)
        copy_state = copy.state_hash()
    # Everything acknowledged before the copy began is in it...
    assert copied >= ref.log_after(max(said_before.done, default=-1))
    # ...and it is exactly the state the live database had after that many transactions.
    with Database.open(data, module) as live:
        assert log_length(live) == ref.log_after(len(w.steps) - 1) > copied
        assert state_at(live, copied) == copy_state


def test_cli_backup_refuses_a_bad_target_or_source(tmp_path: Path) -> None:
    rm = create_retry_module()
    Database.create(tmp_path / "live", rm.module, owner=OWNER).close()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = CliRunner().invoke(backup_command, ["--data", str(tmp_path / "live"), str(tmp_path / "full")])
    assert r.exit_code == 2 and "not empty" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(backup_command, ["--data", str(tmp_path / "nothing"), str(tmp_path / "c")])
    assert r.exit_code == 2 and "no database" in r.output
    assert not (tmp_path / "nothing").exists()
    r = CliRunner().invoke(backup_command, ["--data", str(tmp_path / "live"), str(tmp_path / "ok")])
    assert r.exit_code == 0 and "verified" in r.output
    with Database.open(tmp_path / "ok", rm.module) as copy, copy.read() as v:
        assert v.db.retry_admin.count() == 1


GROWER = """
import sys
from stdbmod.storage import LmdbStorage, StorageFull
s = LmdbStorage(sys.argv[1], map_size=1 << 20)
s.ensure_spaces(["blobs"])
for i in range(40):
    while True:
        w = s.begin_write()
        try:
            w.put("blobs", i.to_bytes(4, "big"), b"z" * (256 << 10))
            w.commit()
            break
        except StorageFull:
            w.abort()
            s.grow()
s.close()
"""


def test_a_reader_process_adopts_a_map_another_process_grew(tmp_path: Path) -> None:
    from stdbmod.storage import LmdbStorage

    here = LmdbStorage(str(tmp_path / "db"), map_size=1 << 20)
    try:
        here.ensure_spaces(["blobs"])
        subprocess.run([sys.executable, "-c", GROWER, str(tmp_path / "db")], env=env(), check=True, timeout=60)
        with here.begin_read() as r:  # the other process's map is now far larger than ours
            assert r.count("blobs") == 40
        here.copy_to(str(tmp_path / "copy"))
    finally:
        here.close()
    copy = LmdbStorage(str(tmp_path / "copy"))
    try:
        with copy.begin_read() as r:
            assert [len(v) for _, v in r.scan("blobs")] == [256 << 10] * 40
    finally:
        copy.close()


def test_the_stdbmod_command_has_backup(tmp_path: Path) -> None:
    from stdbmod.cli.main import cli

    rm = create_retry_module()
    Database.create(tmp_path / "live", rm.module, owner=OWNER).close()
    r = CliRunner().invoke(cli, ["backup", "--data", str(tmp_path / "live"), str(tmp_path / "copy")])
    assert r.exit_code == 0 and "verified" in r.output, r.output
    r = CliRunner().invoke(cli, ["backup", "--data", str(tmp_path / "live"), str(tmp_path / "copy")])
    assert r.exit_code == 2 and "not empty" in r.output and len(r.output.strip().splitlines()) == 1, r.output
