"""Page "Leaderboard": every measured kernel in SQLite (coming next)."""

from app.components import coming_next

coming_next("Leaderboard", "Every measurement, by hand or by search, ranked in one SQLite database.", [
    "best schedule per kernel and target, history over time, roofline",
    "import and export of MetaSchedule JSON databases",
])
