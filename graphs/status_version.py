"""A graph's status version: ``StatusStamp.value``, one number per graph that moves whenever
something its status shows was written. It is kept here, in Python, by the writers themselves:
whoever writes a row the status shows calls ``moved`` with the graphs it changed, after its
writes and in the same transaction (or just after, in autocommit).

The writers, all of them:

* ``graphs.status_cache``: a runtime's observation (pods, events, the deployment's state), only
  when it changed what is shown (a look that found nothing new keeps the version);
* ``graphs.operations``: an operation recorded, its outcome committed on the deployment, and
  every state change of an ``Operation`` (``Operation.moved``, which ``jobs.models.Job`` calls
  after each of its writes);
* ``graphs.planner_decisions``: a Planner decision recorded or moved on;
* ``graphs.runtimes.kubernetes.owners``: a scaling change someone else made on the cluster, and
  the ownership view the page shows.

A write that does not go through these (plain SQL, the shell) is shown by the next fetch of the
status (``graphs.status_view`` reads its rows at every request), but no open page is told of it
until the graph's status moves again.

The reader: ``graphs.live`` tells every open page of a graph that its status changed, on
PostgreSQL through the ``NOTIFY`` that ``moved`` sends (delivered at the commit), on SQLite by
reading versions; the page then fetches its status."""

from __future__ import annotations

from django.apps import apps
from django.db import connection

CHANNEL = "graphs_status"  # PostgreSQL: the channel graphs.live listens on


def moved(*graph_ids: int | None) -> None:
    """The status of these graphs changed: add one to each one's version (a graph that no
    longer exists is skipped) and, on PostgreSQL, notify the pages that show it."""
    ids = sorted({int(g) for g in graph_ids if g is not None})  # one lock order for every writer
    if not ids:
        return
    marks = ", ".join(["%s"] * len(ids))
    # Looked up, not imported: graphs.models' Operation calls this (no import circle).
    stamp, graph = (apps.get_model("graphs", name)._meta.db_table for name in ("StatusStamp", "Graph"))
    with connection.cursor() as cursor:
        # One statement: an upsert (PostgreSQL and SQLite 3.24+), so that two writers of a new
        # graph both count. "WHERE true" ends SQLite's SELECT before ON CONFLICT (its docs).
        cursor.execute(f"INSERT INTO {stamp} (graph_id, value) SELECT id, 1 FROM {graph} "  # noqa: S608
                       f"WHERE id IN ({marks}) AND true "
                       f"ON CONFLICT (graph_id) DO UPDATE SET value = {stamp}.value + 1", ids)
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_notify(%s, g::text) FROM unnest(%s::bigint[]) AS g", [CHANNEL, ids])
