"""The laptop's folder broker hands a worker whole messages only (controlplane/broker.py)."""

import kombu
import pytest
from kombu.transport import filesystem

from controlplane import broker


def _connection(tmp_path, transport):
    folder = tmp_path / "broker"
    folder.mkdir(exist_ok=True)
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder),
               "control_folder": str(tmp_path), "store_processed": False}
    return kombu.Connection("filesystem://localhost/", transport=transport, transport_options=options)


def _read_while_writing(tmp_path, monkeypatch, transport):
    """Put one message; while its bytes are being written, a second connection reads the queue."""
    seen = []
    with _connection(tmp_path, transport) as writer, _connection(tmp_path, transport) as reader:
        reading = reader.default_channel

        def encode_and_peek(text):
            try:
                seen.append(reading._get("celery"))
            except filesystem.Empty:
                seen.append(None)
            return text.encode()

        monkeypatch.setattr(filesystem, "str_to_bytes", encode_and_peek)
        monkeypatch.setattr(broker, "str_to_bytes", encode_and_peek)
        writer.default_channel._put("celery", {"body": "x" * 1000})
        monkeypatch.undo()
        return seen, reading._get("celery")


def test_a_message_being_written_is_not_visible_and_arrives_whole_after(tmp_path, monkeypatch):
    seen, after = _read_while_writing(tmp_path, monkeypatch, "controlplane.broker:Transport")
    assert seen == [None]
    assert after == {"body": "x" * 1000}


def test_kombus_own_folder_transport_hands_the_reader_an_empty_file(tmp_path, monkeypatch):
    """What the subclass is for: the stock transport's reader gets the file before its bytes."""
    with pytest.raises(ValueError):  # json.JSONDecodeError
        _read_while_writing(tmp_path, monkeypatch, "kombu.transport.filesystem:Transport")


def test_the_default_broker_uses_the_whole_message_transport(tmp_path):
    """The laptop default (no CELERY_BROKER_URL), and any filesystem:// URL, sends and takes
    tasks through the subclass."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    env.update(DJANGO_SETTINGS_MODULE="controlplane.settings", CONTROLPLANE_VAR_DIR=str(tmp_path))
    code = ("import django; django.setup(); from controlplane.celery import app; "
            "c = app.connection_for_write(); print(type(c.transport).__module__, type(c.transport).__name__)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["controlplane.broker", "Transport"], out.stderr[-2000:]
