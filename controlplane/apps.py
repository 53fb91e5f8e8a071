import re
import warnings

from django.apps import AppConfig
from django.conf import settings


class ControlplaneConfig(AppConfig):
    name = "controlplane"

    def ready(self) -> None:
        # Every query on PostgreSQL ends by DATABASE_QUERY_DEADLINE_S, answered or not.
        from availability import database

        database.install()
        # The API refuses a JSON number for a text field and 0/1 for a boolean (controlplane/json_types.py).
        from controlplane import json_types

        json_types.install()
        # Not collected (`make up`, a checkout): WhiteNoise serves the static files from the
        # finders (WHITENOISE_USE_FINDERS) and warns at every web worker's start that
        # STATIC_ROOT does not exist, which is expected there and alarms a newcomer for nothing.
        if settings.WHITENOISE_USE_FINDERS:
            warnings.filterwarnings("ignore", message=rf"No directory at: {re.escape(str(settings.STATIC_ROOT))}",
                                    category=UserWarning)
