"""The Celery application. Tasks live in each app's tasks module."""

import os

from celery import Celery
from kombu import transport

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
# Every filesystem:// broker URL, whoever connects with it, gets whole messages only: kombu's
# own folder transport can hand a worker a file not yet written (controlplane/broker.py).
transport.TRANSPORT_ALIASES["filesystem"] = "controlplane.broker:Transport"

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
