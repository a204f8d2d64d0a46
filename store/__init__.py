"""The schedx leaderboard: every measured kernel in one SQLite database (sqlite-utils, WAL).

The UI, the CLI and MetaSchedule (through ``search.ms_database``) read and write it. No TVM here:
workload modules and traces are opaque JSON, so the store stays light and importable anywhere.
"""

from store.db import Store, default_db_path
from store.errors import (CorruptDatabaseError, ForeignDatabaseError, ImportFormatError, ReadOnlyDatabaseError,
                          SchemaTooNewError, StoreError)
from store.records import Job, Outcome, Record, Workload

__all__ = ["CorruptDatabaseError", "ForeignDatabaseError", "ImportFormatError", "Job", "Outcome", "ReadOnlyDatabaseError",
           "Record", "SchemaTooNewError", "Store", "StoreError", "Workload", "default_db_path"]
