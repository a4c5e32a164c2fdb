"""Scenario files: load them, run them against a fresh database, report each step.

    from stdbmod.scenarios import load, run
    report = run(load("scenarios/demo.toml"))
    assert report.passed, report.failure
"""

from ..local.modspec import LoadedModule, ModuleSpecError, load_module
from .format import Scenario, ScenarioFormatError, decode, load
from .runner import Report, StepResult, check, identity_of, run

__all__ = [
    "Scenario",
    "ScenarioFormatError",
    "decode",
    "load",
    "run",
    "check",
    "Report",
    "StepResult",
    "identity_of",
    "LoadedModule",
    "ModuleSpecError",
    "load_module",
]
