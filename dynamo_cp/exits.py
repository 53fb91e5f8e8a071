"""Exit statuses that scripts can rely on. README.md lists them; they never change meaning."""

from __future__ import annotations

OK = 0  # done; for --wait, the operation or benchmark run succeeded
FAILED = 1  # an operation or benchmark run finished, and it failed (or was cancelled)
USAGE = 2  # the command line is wrong, a file cannot be read, or no URL/token is configured
AUTH = 3  # 401/403: no token, a wrong, expired or revoked one, or a role that may not do this
NOT_FOUND = 4  # 404: no such graph, revision, operation or run
INVALID = 5  # 400: the server refused the input (it names what and where); `validate`: the manifest has errors
CONFLICT = 6  # 409: refused in the current state (another operation runs, the graph is still deployed)
TIMEOUT = 7  # --wait ran out of --timeout; the work goes on on the server
UNAVAILABLE = 8  # the server cannot be reached, or it answered with a server error

DESCRIPTIONS = {
    OK: "success",
    FAILED: "the operation or benchmark run failed or was cancelled",
    USAGE: "bad command line, unreadable file, or no URL/token configured",
    AUTH: "not authenticated (missing, wrong, expired or revoked token) or not allowed",
    NOT_FOUND: "not found",
    INVALID: "the input is invalid",
    CONFLICT: "refused in the current state",
    TIMEOUT: "still running after --timeout",
    UNAVAILABLE: "the control plane cannot be reached or failed",
}


class CliError(Exception):
    """Ends the command with ``code`` and ``message`` on stderr."""

    def __init__(self, code: int, message: str, *, details: list[str] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or []
