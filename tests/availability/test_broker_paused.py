"""A Redis broker that is paused (SIGSTOP, a partition: it accepts and never answers) holds a
request that sends a task for at most the broker's socket timeout (CELERY_BROKER_TIMEOUT), and
the request goes on: the work is recorded and the periodic sweep sends it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.availability.test_database_paused import PausingRelay

ROOT = Path(__file__).resolve().parents[2]
SEND = """
import json, logging, time
import django
django.setup()
from jobs.dispatch import enqueue
seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append(record.getMessage())
logging.getLogger("jobs.dispatch").addHandler(Keep())
started = time.monotonic()
enqueue("jobs.tasks.jobs_sweep", on_commit=False)
print(json.dumps({"seconds": time.monotonic() - started, "logged": seen}))
"""


def _send_through(relay: PausingRelay, timeout: str) -> dict:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="controlplane.settings", CELERY_TASK_ALWAYS_EAGER="0",
               CELERY_BROKER_URL=f"redis://127.0.0.1:{relay.port}/15", CELERY_BROKER_TIMEOUT=timeout)
    done = subprocess.run([sys.executable, "-c", SEND], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sending_a_task_to_a_paused_redis_gives_up_after_the_socket_timeout_and_says_so():
    relay = PausingRelay("127.0.0.1", 6379)
    try:
        relay.pause()
        sent = _send_through(relay, "1")
    finally:
        relay.close()
    # Bounded by the timeout (connect and first command each wait at most 1 s), not by the pause.
    assert sent["seconds"] < 10, sent
    assert any("not sent, the broker is unreachable" in line for line in sent["logged"]), sent


def test_sending_a_task_to_a_redis_that_answers_is_not_held_up_by_the_timeout():
    relay = PausingRelay("127.0.0.1", 6379)
    try:
        sent = _send_through(relay, "1")
    finally:
        relay.close()
    assert sent["logged"] == [], sent
