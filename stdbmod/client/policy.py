"""What a handler raises to choose how its attempt ends, beside returning (complete) and raising
anything else (fail, retried with the job's backoff): the failure policy the server offers
(docs/retry.md, "Failure policy")."""

from __future__ import annotations


class GiveUp(Exception):
    """Fail the attempt and do not retry: the job goes to the dead-letter tier at once (reason
    `discarded`). For errors no retry can fix: a malformed payload, a permanent 4xx."""


class RetryIn(Exception):
    """Fail the attempt and retry it in `seconds` instead of the job's backoff (a rate limit's
    Retry-After, say). It still spends an attempt: past `max_attempts` the job is dead."""

    def __init__(self, seconds: int, reason: str = "") -> None:
        if seconds < 0:
            raise ValueError(f"RetryIn takes seconds >= 0, got {seconds}")
        super().__init__(reason or f"retry in {seconds} s")
        self.seconds = seconds


class Snooze(Exception):
    """Put the job back to run in `seconds` without spending an attempt (the resource is not
    ready yet). The server bounds how often a job may snooze; past that a snooze counts as a
    failed attempt retried in `seconds`."""

    def __init__(self, seconds: int) -> None:
        if seconds < 1:
            raise ValueError(f"Snooze takes seconds >= 1, got {seconds}")
        super().__init__(f"snoozed for {seconds} s")
        self.seconds = seconds
