"""Rendering the dashboard: Jinja2 templates and the static files shipped in the package, the
headers every answer carries, and reading a form.

A page is rendered whole, or just its live part (the `live` block) when the page's script asks
for it (header X-Dashboard-Fragment) to refresh in place. Every answer forbids framing, inline
scripts and styles, and outside sources (a Content-Security-Policy of 'self' only), sends no
referrer (a sign-in link carries its ticket in the URL) and is not cached.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ...types import Identity, Timestamp
from .. import inputs
from ..errors import HttpError

FORM_LIMIT = 16 * 1024
FRAGMENT_HEADER = b"x-dashboard-fragment"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def _when(t: Timestamp | None) -> str:
    if t is None:
        return ""
    if not t.in_range():  # a stored time a datetime cannot hold (a module computed it)
        return t.isoformat()
    return t.to_datetime().strftime("%Y-%m-%d %H:%M:%S UTC")


def _millis(t: Timestamp | None) -> int | None:
    return None if t is None else t.micros // 1000


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _short(identity: Identity | None) -> str:
    return "" if identity is None else identity.to_hex()[:12] + "…"


def _query(params: Mapping[str, Any], **changes: Any) -> str:
    merged = {k: v for k, v in {**params, **changes}.items() if v not in (None, "")}
    return "?" + urlencode(merged) if merged else ""


class Web:
    def __init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("stdbmod.http.dashboard", "templates"),
            autoescape=jinja2.select_autoescape(["html"]),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(when=_when, millis=_millis, json=_json, short=_short)
        self.env.globals.update(static=self.static_url, query=_query)
        folder = resources.files("stdbmod.http.dashboard") / "static"
        self.files: dict[str, tuple[bytes, str]] = {}
        for item in folder.iterdir():
            suffix = item.name[item.name.rfind(".") :]
            if suffix in _TYPES:
                body = item.read_bytes()
                self.files[item.name] = (body, hashlib.sha256(body).hexdigest()[:12])

    def static_url(self, name: str) -> str:
        return f"/dashboard/static/{name}?v={self.files[name][1]}"

    def render(self, request: Request, template: str, values: dict[str, Any], status: int = 200) -> Response:
        fragment = inputs.header(request, FRAGMENT_HEADER) is not None  # base.html renders just the `live` block
        html = self.env.get_template(template).render(values, fragment=fragment)
        return secure(HTMLResponse(html, status))

    def static(self, name: str) -> Response:
        found = self.files.get(name)
        if found is None:
            raise HttpError(404, f"no such file: {name}")
        body, _ = found
        response = Response(body, media_type=_TYPES[name[name.rfind(".") :]])
        secure(response)
        response.headers["Cache-Control"] = "public, max-age=86400, immutable"  # the URL names the content's hash
        return response


def secure(response: Response) -> Response:
    for k, v in SECURITY_HEADERS.items():
        response.headers.setdefault(k, v)
    return response


def redirect(url: str) -> Response:
    return secure(RedirectResponse(url, status_code=303))


def local_path(url: str | None, default: str = "/dashboard") -> str:
    """A redirect target after a form: only a path of the dashboard's (never another site)."""
    if url and url.startswith("/dashboard") and not url.startswith("//") and "\\" not in url:
        return url
    return default


async def form(request: Request) -> dict[str, str]:
    """An urlencoded form body (what the dashboard's forms send), bounded; the first value of
    each field."""
    kind = (inputs.header(request, b"content-type") or "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HttpError(415, "the dashboard's forms send application/x-www-form-urlencoded")
    raw = await inputs.read_body(request, FORM_LIMIT)
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=64, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise HttpError(400, "the form is not valid") from None
    out: dict[str, str] = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def parse_time(text: str | None) -> Timestamp | None:
    """A time filter's value: the browser's datetime-local (read as UTC) or RFC 3339."""
    if not text:
        return None
    try:
        return Timestamp.parse(text)
    except ValueError:
        pass
    try:  # datetime-local (YYYY-MM-DDTHH:MM, no offset) is not RFC 3339: the form's fields are UTC
        value = dt.datetime.fromisoformat(text)
        return Timestamp.from_datetime(value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC))
    except ValueError:
        raise HttpError(400, f"not a time: {text!r} (use YYYY-MM-DDTHH:MM, UTC)") from None

