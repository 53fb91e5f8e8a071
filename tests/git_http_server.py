"""Debian's ``git http-backend`` (smart HTTP) behind the standard library's CGI server, with HTTP
Basic authentication in front, for the credential tests (tests/repos/test_repos_credentials.py).

    python tests/git_http_server.py PORT PROJECT_ROOT USER PASSWORD"""

from __future__ import annotations

import base64
import os
import sys
import tempfile
from http.server import CGIHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BACKEND = "/usr/lib/git-core/git-http-backend"


def main(port: int, root: str, user: str, password: str) -> None:
    site = Path(tempfile.mkdtemp(prefix="git-http-"))
    (site / "cgi-bin").mkdir()
    # The CGI server runs scripts from its own folder (a link: /tmp may be mounted noexec).
    (site / "cgi-bin" / "git").symlink_to(BACKEND)
    os.environ.update(GIT_PROJECT_ROOT=root, GIT_HTTP_EXPORT_ALL="1")
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    class Handler(CGIHTTPRequestHandler):
        # Run the CGI with subprocess: the fork path switches to the user nobody when run as root,
        # who may neither read nor push to the test's repositories.
        have_fork = False

        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(site), **kwargs)

        def _authorised(self) -> bool:
            if self.headers.get("Authorization") == expected:
                return True  # the CGI server passes the Basic user on as REMOTE_USER, as pushes need
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False

        def do_GET(self):
            if self._authorised():
                super().do_GET()

        def do_POST(self):
            if self._authorised():
                super().do_POST()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
