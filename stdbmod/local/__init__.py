"""What the front ends (CLI, HTTP server, scenarios) share about a local installation: module
specs (`modspec`), data directories and the module recorded in them (`datadir`), publishing one
(`publish`), and the local user's identity (`identity`)."""

from .datadir import DataDirConfig, keep_in_step, open_database, read_config, write_config
from .modspec import RETRY_SPEC, LoadedModule, ModuleSpecError, load_module
from .publish import DatabaseExists, Published, module_to_publish, publish

__all__ = [
    "DataDirConfig", "keep_in_step", "open_database", "read_config", "write_config",
    "RETRY_SPEC", "LoadedModule", "ModuleSpecError", "load_module",
    "DatabaseExists", "Published", "module_to_publish", "publish",
]
