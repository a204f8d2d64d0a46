"""Page "Search": MetaSchedule sketches and evolutionary search (coming next)."""

from app.components import coming_next

coming_next("Search", "Ansor-style sketch generation and evolutionary search with MetaSchedule.", [
    "sketches (design spaces) per kernel, with the schedule rules that made them",
    "evolutionary search with the XGBoost cost model, live progress per task, resumable jobs",
])
