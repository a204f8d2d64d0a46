"""The schedx leaderboard: every measured kernel in one SQLite database (sqlite-utils, WAL).

The UI, the CLI and MetaSchedule (through ``search.ms_database``) read and write it. No TVM here:
workload modules and traces are opaque JSON, so the store stays light and importable anywhere.
Names load on first use: ``from store.errors import StoreError`` or ``store.outcome`` cost
nothing, and sqlite-utils (with pandas behind it) loads with the first ``Store``.
"""

from __future__ import annotations

from store.lazy import lazy_names

_NAMES = {
    "Store": "db", "default_db_path": "db",
    "CorruptDatabaseError": "errors", "ForeignDatabaseError": "errors", "ImportFormatError": "errors",
    "ReadOnlyDatabaseError": "errors", "SchemaTooNewError": "errors", "StoreError": "errors",
    "Job": "records", "Record": "records", "Workload": "records",
    "Decision": "decisions",
    "Outcome": "outcome",
}


__getattr__ = lazy_names(__name__, _NAMES)


__all__ = sorted(_NAMES)
