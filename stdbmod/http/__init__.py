"""The HTTP front end: seed 000's job API and SpacetimeDB-style routes over one database.

    from stdbmod.http import create_app, load_or_create_key, serve
"""

from ..local.tokens import Claims, InvalidToken, SigningKey, load_or_create_key
from .app import create_app
from .context import ServerContext
from .errors import HttpError
from .serve import ServeError, serve

__all__ = [
    "create_app",
    "serve",
    "ServeError",
    "load_or_create_key",
    "SigningKey",
    "Claims",
    "InvalidToken",
    "HttpError",
    "ServerContext",
]
