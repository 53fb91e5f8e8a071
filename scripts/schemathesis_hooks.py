"""Credentials for scripts/api_schemathesis.sh: an admin API token, minted again whenever the
run's own requests revoked it (the fuzzer finds the token's prefix in GET /api/tokens/ and
DELETEs it, as the API allows: a token may revoke itself). schemathesis asks again on a 401.

Loaded with SCHEMATHESIS_HOOKS=scripts.schemathesis_hooks from the repository's root."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import schemathesis

ROOT = Path(__file__).resolve().parents[1]
_serial = itertools.count(1)


@schemathesis.auth()
class AdminToken:
    def get(self, case, context):
        done = subprocess.run([sys.executable, "manage.py", "create_token", "admin", "--name",
                               f"schemathesis-{next(_serial)}"], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=120)
        return done.stdout.strip().split()[-1]

    def set(self, case, data, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Token {data}"}
