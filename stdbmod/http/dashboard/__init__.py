"""The admin web dashboard at /dashboard (the `dashboard` extra: jinja2): server-rendered pages
with a small script for the live parts, its assets inside the package. See docs/dashboard.md."""

from .reads import BUDGET, PAGE, Cursor, JobFilter, NotAllowed
from .sessions import COOKIE, Sessions
from .site import Dashboard
from .tickets import BadTicket, Tickets, issue

__all__ = ["Dashboard", "Sessions", "Tickets", "BadTicket", "issue", "COOKIE", "JobFilter", "Cursor", "NotAllowed", "BUDGET", "PAGE"]
