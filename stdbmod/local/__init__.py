"""What the front ends (CLI, HTTP server, scenarios) share about a local installation: module
specs (`modspec`), data directories and the module recorded in them (`datadir`), and the local
user's identity (`identity`)."""

from .datadir import DataDirConfig, open_database, read_config, write_config
from .modspec import RETRY_SPEC, LoadedModule, ModuleSpecError, load_module

__all__ = ["DataDirConfig", "open_database", "read_config", "write_config", "RETRY_SPEC", "LoadedModule", "ModuleSpecError", "load_module"]
