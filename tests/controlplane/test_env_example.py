"""How settings are given (issue #43, item 9): nothing reads a .env file, and .env.example says
so; the way it names to use the file, exported into the shell that starts the control plane,
works on the file as shipped (every line a shell can read) and its values reach the settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / ".env.example"


def test_env_example_says_how_it_is_given_and_its_values_reach_the_settings(tmp_path):
    text = EXAMPLE.read_text()
    recipe = "set -a && . <(grep -v '=$' .env) && set +a"
    assert "Nothing reads a .env file" in text and recipe in text
    assert recipe in (ROOT / "README.md").read_text()
    env_file = tmp_path / ".env"
    env_file.write_text(text.replace("AXES_FAILURE_LIMIT=5", "AXES_FAILURE_LIMIT=7"))
    probe = ("import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'controlplane.settings'); "
             "django.setup(); from django.conf import settings; "
             "print(settings.AXES_FAILURE_LIMIT, settings.OIDC_SCOPES if hasattr(settings, 'OIDC_SCOPES') else '')")
    command = f"set -e; {recipe} && exec {sys.executable} -c \"$0\""
    done = subprocess.run(["bash", "-c", command, probe], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
                               "CONTROLPLANE_VAR_DIR": str(tmp_path / "var")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.strip() == "" or "command not found" not in done.stderr
    assert done.stdout.split()[0] == "7"
