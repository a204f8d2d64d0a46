"""Claims of a search's candidates in the database, so that searches running at the same time on
one workload and database never measure the same candidate (see :mod:`store.claims`).

:class:`PoolRunner <search.runner.PoolRunner>` claims each batch's candidates before it measures
them; a candidate another search has claimed or measured meanwhile is not measured here (it is
``skipped``: no record, it costs no trial); the claims go once the batch's records are written
(every part of a batch written in parts: :mod:`search.defaults_round`), and when the search ends.

A claim belongs to a process, named by its pid and start time: the claims of a search on this
machine whose process is gone (kill -9 never releases them), or whose pid a later process has, are
dropped the next time a search here claims anything. Their time to live is the fallback, for a
search on another machine."""

from __future__ import annotations

import os
import socket

from explorer.processes import process_alive, process_started
from store import Store, StoreError


class ClaimBook:
    """This search's claims: ``owner`` names it (``host:pid.started:job``: the process by its pid
    and start time, see :func:`owner_process`); ``task_keys`` are the workload keys of its tasks,
    by task index."""

    def __init__(self, store: Store, *, target_key: str, hardware: str, task_keys: list[str],
                 job_id: int | None = None) -> None:
        self.store, self.target_key, self.hardware, self.task_keys = store, target_key, hardware, task_keys
        started = process_started()
        process = f"{os.getpid()}.{started}" if started is not None else str(os.getpid())
        self.owner = f"{socket.gethostname()}:{process}:{job_id if job_id is not None else '-'}"
        self.skipped: set[str] = set()  # candidates another search measures: never recorded here

    def claim(self, task: int, hashes: list[str], ttl_s: float = 900.0) -> set[str]:
        """The candidates of ``task`` among ``hashes`` this search may measure now, claimed for
        ``ttl_s`` (longer than measuring them can take: a claim that lapses mid-batch would let
        another search take the candidate). All of them when the database cannot take the claim
        now: writing the batch will fail and stop the search anyway, and an error raised here
        would cross MetaSchedule's C++."""
        try:
            self._release_the_dead()
        except StoreError:  # cannot write now: the dead's claims expire on their own
            pass
        try:
            granted = set(self.store.claim_candidates(self.task_keys[task], self.target_key, self.hardware, hashes,
                                                      owner=self.owner, ttl_s=ttl_s))
        except StoreError:
            return set(hashes)
        self.skipped.update(h for h in hashes if h not in granted)
        return granted

    def _release_the_dead(self) -> None:
        """Drop the claims of searches on this machine whose process is gone (killed with -9: they
        never released theirs, which held their candidates for the claims' 15 minutes), or whose
        pid another process has now (its start time differs)."""
        host = socket.gethostname()
        for owner in self.store.live_claims():
            process = owner_process(owner)
            if process is not None and process[0] == host and owner != self.owner and \
                    not process_alive(process[1], process[2]):
                self.store.release_claims(owner)

    def release(self) -> None:
        """Drop this search's claims (its records now answer for what it measured)."""
        try:
            self.store.release_claims(self.owner)
        except StoreError:  # a database that cannot be written now: the claims expire on their own
            pass


def owner_process(owner: str) -> tuple[str, int, int | None] | None:
    """``(host, pid, start time or None)`` of a claim's owner ``host:pid[.started]:job`` (a host
    name may hold ':'); None for an owner of another form."""
    rest, _, _job = owner.rpartition(":")
    host, _, process = rest.rpartition(":")
    pid, _, started = process.partition(".")
    if not host or not (pid.isascii() and pid.isdigit()) or (started and not (started.isascii() and started.isdigit())):
        return None
    return host, int(pid), int(started) if started else None


__all__ = ["ClaimBook", "owner_process"]
