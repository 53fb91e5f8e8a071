"""The folder broker of a laptop install (`CELERY_BROKER_URL=filesystem://`), with whole messages.

kombu's filesystem transport creates a message file, then locks it, then writes it; a worker
listing the folder can take the file between the create and the write, read nothing and stop
on a JSONDecodeError (celery/kombu#1551, open). Here a message is written under a name the
reader skips and renamed into place, which is atomic within one folder, so a reader sees a
whole message or none.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # The reader takes files whose name after the first dot is exactly "<queue>.msg".
        partial = final + ".partial"
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
