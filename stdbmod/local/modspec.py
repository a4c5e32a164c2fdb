"""Finding a module from a spec string, as the CLI and scenario files name them.

A spec is an import path (``stdbmod.examples.bank``) or a ``.py`` file, optionally followed by
``:attribute``. Without an attribute the Python module must hold exactly one top-level `Module`
that no other module there includes (a user module that includes the task-retry module wins
over the retry module it includes). The attribute (or the found object) may be:

- a `Module`;
- an object with a ``module`` attribute that is a `Module` (a `RetryModule`); its ``handlers``
  dict, if it has one, is what scenarios script;
- a function taking no arguments that returns one of those (a factory, for a fresh instance).

The task-retry module's handlers are found the same way for a user module that includes it: the
object in the same Python module whose ``module`` is among the user module's ``included``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import InvalidValue
from ..module import Module

RETRY_SPEC = "stdbmod.retry:default_retry"
"""The built-in task-retry module, published when no MODULE is given."""


class ModuleSpecError(InvalidValue):
    """The spec names nothing usable; the message says why, in one line."""


Handlers = dict[str, Callable[..., Any]]


@dataclass
class LoadedModule:
    spec: str
    module: Module
    handlers: Handlers | None  # the task-retry handler registry, when the module has one


def _import(path: str) -> ModuleType:
    if path.endswith(".py") or os.sep in path or "/" in path:
        file = os.path.abspath(path)
        if not os.path.isfile(file):
            raise ModuleSpecError(f"no such module file: {path}")
        name = "stdbmod_user_" + "".join(c if c.isalnum() else "_" for c in file)
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise ModuleSpecError(f"cannot load {path} as Python")
        mod = importlib.util.module_from_spec(spec)
        # Registered before running so msgspec and typing can resolve the file's annotations.
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as e:
            del sys.modules[name]
            raise ModuleSpecError(f"cannot import {path}: {type(e).__name__}: {e}") from e
        return mod
    # Like `python -m` and uvicorn: modules next to where the command runs are importable.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as e:
        raise ModuleSpecError(f"cannot import {path}: {e}") from None
    except Exception as e:  # the module's own code failed: say so in one line
        raise ModuleSpecError(f"cannot import {path}: {type(e).__name__}: {e}") from e


def _module_of(obj: Any) -> Module | None:
    if isinstance(obj, Module):
        return obj
    inner = getattr(obj, "module", None)
    return inner if isinstance(inner, Module) else None


def _handlers_of(obj: Any) -> Handlers | None:
    h = getattr(obj, "handlers", None)
    return h if isinstance(h, dict) else None


def _find_handlers(namespace: dict[str, Any], module: Module) -> Handlers | None:
    """The handler registry of the retry module `module` is, or includes."""
    wanted = [module, *module.included]
    for obj in namespace.values():
        if _module_of(obj) in wanted and not isinstance(obj, Module):
            found = _handlers_of(obj)
            if found is not None:
                return found
    return None


def _pick(pymod: ModuleType, spec: str) -> Any:
    """The one top-level module of `pymod` that no other includes."""
    seen: dict[int, Any] = {}
    for value in vars(pymod).values():
        m = _module_of(value)
        if m is not None and id(m) not in seen:
            seen[id(m)] = value
    included = {id(inc) for v in seen.values() for inc in _module_of(v).included}  # type: ignore[union-attr]
    roots = [v for k, v in seen.items() if k not in included]
    # A RetryModule and its own Module are one candidate: prefer the object with handlers.
    by_module: dict[int, Any] = {}
    for v in roots:
        key = id(_module_of(v))
        if key not in by_module or _handlers_of(v) is not None:
            by_module[key] = v
    if not by_module:
        raise ModuleSpecError(f"{spec} defines no stdbmod Module (name one with {spec}:ATTRIBUTE)")
    if len(by_module) > 1:
        names = sorted(n for n, v in vars(pymod).items() if v in by_module.values())
        raise ModuleSpecError(f"{spec} defines several modules ({', '.join(names)}); name one with {spec}:ATTRIBUTE")
    return next(iter(by_module.values()))


def _split(spec: str) -> tuple[str, str]:
    path, sep, attr = spec.rpartition(":")
    if sep and path and attr.isidentifier():
        return path, attr
    return spec, ""


def load_module(spec: str) -> LoadedModule:
    """Resolve `spec` to a module (and its task-retry handlers, if any)."""
    spec = spec.strip()
    if not spec:
        raise ModuleSpecError("empty module spec")
    path, attr = _split(spec)
    pymod = _import(path)
    if attr:
        try:
            obj: Any = getattr(pymod, attr)
        except AttributeError:
            raise ModuleSpecError(f"{path} has no attribute {attr!r}") from None
    else:
        obj = _pick(pymod, spec)
    if callable(obj) and _module_of(obj) is None:
        try:
            obj = obj()
        except Exception as e:
            raise ModuleSpecError(f"{spec}: calling {attr or 'the factory'} failed: {type(e).__name__}: {e}") from e
    module = _module_of(obj)
    if module is None:
        raise ModuleSpecError(f"{spec} is not a stdbmod Module (nor a RetryModule, nor a factory of one)")
    handlers = _handlers_of(obj) if not isinstance(obj, Module) else None
    if handlers is None:
        handlers = _find_handlers(vars(pymod), module)
    return LoadedModule(spec, module, handlers)


def canonical_spec(spec: str) -> str:
    """The spec as stored for later commands: a file path made absolute (they may run elsewhere)."""
    path, attr = _split(spec)
    if path.endswith(".py") or "/" in path or os.sep in path:
        path = os.path.abspath(path)
    return f"{path}:{attr}" if attr else path
