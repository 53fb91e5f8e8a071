"""Django's PostgreSQL backend (``ENGINE = "availability.postgresql"``), with two changes: in the
web server a new connection fails at once while the database has just left one unanswered
(availability.database.failing_fast); and its
connection pool checks a connection before handing it out under a deadline
(availability.database.check_connection) instead of with psycopg_pool's bare check, which on a
paused server blocks the request before any of its queries is watched. Django's backend passes
the pool its own ``check`` whenever it builds one (django/db/backends/postgresql/base.py
``DatabaseWrapper.pool``, Django 5.2), so the pool is built here as it builds it, with this check."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.postgresql import base

from ..database import check_connection, deadline_seconds, failing_fast, serving_web, watched


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        """A web request fails at once while the database has just left a connection unanswered
        (availability.database.FAIL_FAST_S); otherwise Django's."""
        if failing_fast():
            import psycopg

            raise psycopg.OperationalError("the database left a connection unanswered a moment ago")
        return super().get_new_connection(conn_params)

    # COMMIT and ROLLBACK are sent by psycopg itself, not through a cursor (where the execute
    # wrapper watches): a database that pauses between a request's last query and its commit
    # would hold it there.
    def _commit(self):
        with watched(self.connection):
            return super()._commit()

    def _rollback(self):
        with watched(self.connection):
            return super()._rollback()

    @property
    def pool(self):
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == base.NO_DB_ALIAS or not pool_options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            from psycopg_pool import ConnectionPool

            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True  # as Django's: it sets the mode it wants later on
            options = {} if pool_options is True else dict(pool_options)
            if serving_web() and deadline_seconds() > 0:
                # A web request waits for a connection no longer than for a query.
                options["timeout"] = min(float(options.get("timeout", 30.0)), deadline_seconds())
            pool = ConnectionPool(kwargs=connect_kwargs, open=False, configure=self._configure_connection,
                                  check=check_connection if self.settings_dict["CONN_HEALTH_CHECKS"] else None,
                                  **options)
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]
