"""Times coming in over HTTP (issue 13, defects 5 and 6), against a real server: `run_after` is
epoch milliseconds or RFC 3339 and nothing else, a time outside years 1 to 9999 UTC is refused
in every form it can take (a job's `run_after`, a reducer's Timestamp argument through
/v1/.../call), and a value that looks like seconds is refused saying so."""

from __future__ import annotations

import pytest

from .jobs import Jobs
from .servers import Server, call

MS_2100 = 4_102_444_800_000


@pytest.mark.parametrize(
    "text",
    [
        "2100-01-01",  # a date alone
        "21000101T000000Z",  # ISO 8601's basic format
        "2100-W53-5T00:00:00Z",  # a week date
        "2100-01-01T00Z",  # the hour alone
        "2100-01-01T00:00Z",  # no seconds
        "2100-01-01T01:00:00+0100",  # an offset without its colon
        "2100-01-01T00:00:00,5Z",  # a comma decimal
        "2100-01-01T00:00:00",  # no offset: UTC would only be a guess
        "2100-01-01 00:00:00Z",  # a space for the T
        "2100-01-01T24:00:00Z",
    ],
)
def test_run_after_takes_rfc_3339_only(worker: Jobs, text: str) -> None:
    r = worker.request("POST", "/jobs", {"job_type": "t", "run_after": text})
    assert r.status_code == 400, (text, r.text)
    assert r.json()["error"].startswith("invalid run_after: not a") and "RFC 3339" in r.json()["error"], r.text


@pytest.mark.parametrize(
    "text", ["2100-01-01T00:00:00Z", "2100-01-01t00:00:00z", "2100-01-01T01:00:00+01:00", "2099-12-31T23:00:00.000-01:00"]
)
def test_run_after_rfc_3339_forms_are_the_same_instant(worker: Jobs, text: str) -> None:
    assert worker.enqueue("t", run_after=text)["run_after"] == MS_2100


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_run_after_outside_years_1_to_9999_is_refused(worker: Jobs, text: str) -> None:
    """Year 0 and year 10000 in UTC, reached through an offset (the same instants as integers
    were refused already; strings were accepted and broke the owner's tools)."""
    r = worker.request("POST", "/jobs", {"job_type": "t", "run_after": text})
    assert r.status_code == 400, r.text
    assert "years 1 to 9999" in r.json()["error"]


def test_run_after_in_seconds_is_refused_saying_so(worker: Jobs) -> None:
    r = worker.request("POST", "/jobs", {"job_type": "t", "run_after": 1_767_225_600})  # 2026-01-01 in seconds
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "it looks like seconds (2026-01-01T00:00:00Z)" in error and "send milliseconds (1767225600000)" in error, error
    assert worker.enqueue("t", run_after=0)["run_after"] == 0  # the epoch reads the same in both units: ready at once
    assert worker.enqueue("t", run_after=31_536_000_000)["run_after"] == 31_536_000_000  # 1971 is milliseconds


@pytest.mark.parametrize(
    "when",
    [2**62, -(2**62), {"__timestamp_micros_since_unix_epoch__": 253_402_300_800_000_000}, "0001-01-01T00:00:00+01:00", "2100-01-01"],
)
def test_a_call_argument_outside_years_1_to_9999_is_refused(retry_server: Server, when: object) -> None:
    """Through /v1/.../call a Timestamp argument is integer microseconds (or the wrapped form, or
    RFC 3339): the same range as everywhere else, and the same RFC 3339."""
    r = call(retry_server.base, retry_server.owner_token(), "enqueue", "t", None, None, None, None, when)
    assert r.status_code == 400, r.text
    assert "years 1 to 9999" in r.text or "RFC 3339" in r.text, r.text
    ok = call(retry_server.base, retry_server.owner_token(), "enqueue", "t", None, None, None, None, MS_2100 * 1000)
    assert ok.status_code == 200, ok.text
    listed = call(retry_server.base, retry_server.owner_token(), "enqueue", "t", None, None, None, None, "2100-01-01T00:00:00Z")
    assert listed.status_code == 200, listed.text
