"""SpacetimeDB's special types: Identity, ConnectionId, Timestamp, TimeDuration, ScheduleAt.

Identity, ConnectionId, Timestamp and TimeDuration are small immutable value classes (in
special.py); the hooks in `stdbmod.codec` encode them (bytes or hex for identities, integer
microseconds for times). ScheduleAt is a tagged union of two msgspec Structs, `At` (one-shot)
and `Every` (repeating), as `ScheduleAt::Time` / `ScheduleAt::Interval` in SpacetimeDB.
"""

from __future__ import annotations

import msgspec

from .special import ConnectionId, Identity, TimeDuration, Timestamp

__all__ = ["Identity", "ConnectionId", "Timestamp", "TimeDuration", "At", "Every", "ScheduleAt"]


class At(msgspec.Struct, frozen=True, tag="time"):
    """A one-shot schedule: fire once at `time` (a past time fires at once)."""

    time: Timestamp


class Every(msgspec.Struct, frozen=True, tag="interval"):
    """A repeating schedule: fire every `interval`, first at insert time + interval."""

    interval: TimeDuration


ScheduleAt = At | Every
