"""Errors of the search side."""

from explorer.errors import ExplorerError


class SearchError(ExplorerError):
    """Bad search parameters or a search that cannot start (message says what to change)."""
