"""The web server (controlplane/webserver.py): what ``make up``, the Dockerfile and
deploy/kustomize start."""

from __future__ import annotations

import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane import webserver


class Command(BaseCommand):
    requires_system_checks = []  # the processes it starts run them
    help = ("Serve the product: nginx in front of one uvicorn process per core (WEB_WORKERS), each request "
            "to the least busy; uvicorn alone on one core or where there is no nginx.")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=None,
                            help="web processes (default WEB_WORKERS, else WEB_CONCURRENCY, else the CPUs)")
        parser.add_argument("--timeout-graceful-shutdown", type=int, default=None, dest="graceful_s",
                            help="seconds a stopping process lets its requests finish (uvicorn's option)")

    def handle(self, *args, host, port, workers, graceful_s, **opts):
        workers = settings.WEB_WORKERS if workers is None else workers
        if workers < 1 or not 0 < port < 65536 or (graceful_s is not None and graceful_s < 0):
            raise CommandError("--workers must be 1 or more, --port 1-65535, --timeout-graceful-shutdown 0 or more")
        nginx = webserver.nginx_binary() if workers > 1 else None
        if nginx is None:
            if workers > 1:
                self.stderr.write("web: no nginx (set NGINX_BINARY, or run scripts/services.sh nginx): uvicorn "
                                  f"alone with {workers} workers, which hands out connections, not requests")
            argv = webserver.uvicorn_command(host, port, workers=workers, trusted=settings.FORWARDED_ALLOW_IPS,
                                             graceful_s=graceful_s)
            os.chdir(settings.BASE_DIR)
            sys.stderr.flush()
            os.execv(argv[0], argv)  # noqa: S606 - uvicorn in place of this process, no shell
        argv = webserver.supervisor_command(webserver.plan(host, port, workers, nginx, graceful_s))
        sys.stderr.flush()
        os.execv(argv[0], argv)  # noqa: S606 - the supervisor in place of this process, no shell
