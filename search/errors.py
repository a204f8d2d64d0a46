"""Errors of the search side."""

from explorer.errors import ExplorerError


class SearchError(ExplorerError):
    """Bad search parameters or a search that cannot start (message says what to change)."""


class InfrastructureError(SearchError):
    """Raised inside a search worker when a failure is not the candidate's (an RPC device out of
    reach): the candidate is recorded as ``infra_error`` and tried again on resume."""
