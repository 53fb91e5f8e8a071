"""The one module that runs Git: Debian's ``git`` binary, on a bare mirror per repository.

The mirror is never checked out: commits for the product's changes are built with plumbing
(``hash-object``, a private index, ``commit-tree``) and pushed without force, so a push that
is not a fast-forward is refused by the remote and nothing in Git is ever overwritten.
Credentials travel in the environment of one ``git`` process (an askpass script reading them
from variables, or ``GIT_SSH_COMMAND`` with a key file made for the call), never in the URL,
the mirror's config or a log line."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import stat
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 120  # seconds for one git process: a fetch of a large history over a slow link
STALL_SECONDS = 30  # seconds an HTTP transfer may stay under 1 KB/s (a host that stopped answering)
# A person waiting on Sync now waits less: the periodic sync goes on trying with STALL_SECONDS.
INTERACTIVE_STALL_SECONDS = 10
INTERACTIVE_TIMEOUT = 12  # seconds for Sync now's whole fetch
ZERO = "0" * 40


class GitError(Exception):
    """git failed; the message is git's own last lines, without credentials."""

    def __init__(self, message: str, *, rejected: bool = False):
        super().__init__(message)
        self.rejected = rejected  # a push the remote refused as not a fast-forward


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # a tab and a newline may stay in a commit's body


def _line(text: str, limit: int) -> str:
    return _CONTROL.sub(" ", text.replace("\n", " ")).strip()[:limit]


@dataclass(frozen=True)
class Commit:
    sha: str
    author_name: str
    author_email: str
    committed_at: str  # ISO 8601, as git prints it
    subject: str
    body: str


@dataclass(frozen=True)
class Change:
    status: str  # A (added), M (modified), D (deleted)
    path: str


@dataclass(frozen=True)
class Auth:
    """What one remote needs: a username and password/token (https), or a private key (ssh)."""

    username: str = ""
    password: str = ""
    ssh_key: str = ""


_ASKPASS = "#!/bin/sh\ncase \"$1\" in Username*) printf '%s' \"$DYNAMO_CP_GIT_USER\";; " \
           "*) printf '%s' \"$DYNAMO_CP_GIT_PASSWORD\";; esac\n"


class MirrorBusy(Exception):
    """Another sync holds the mirror now (Mirror.exclusive(wait=False))."""


class Mirror:
    """A bare clone of one branch of a remote, kept under the control plane's var folder."""

    def __init__(self, path: Path, url: str, branch: str, auth: Auth | None = None):
        self.interactive = False  # a person waits on it: INTERACTIVE_STALL_SECONDS
        self.path = Path(path)
        self.url = url
        self.branch = branch
        self.auth = auth or Auth()

    # -- running git ---------------------------------------------------------------------
    def _run(self, *args: str, input: bytes | None = None, env: dict | None = None, remote: bool = False,
             check: bool = True, deadline: float | None = None) -> subprocess.CompletedProcess:
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        base_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
                         "HOME": str(self.path.parent),
                         # A Git host that stops sending (paused, a dead peer) is given up after
                         # STALL_SECONDS below 1 KB/s, well before TIMEOUT (git-config http.lowSpeedTime).
                         "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": str(self.stall_seconds())})
        base_env.update(env or {})
        # ssh never asks (no terminal here): a host key is recorded on first contact, a changed one refused.
        base_env["GIT_SSH_COMMAND"] = self._ssh()
        # A person waiting on Sync now: the whole exchange with the host, not each of its
        # requests, ends by the interactive bound (a fetch is two HTTP requests, each may stall).
        timeout = INTERACTIVE_TIMEOUT if remote and self.interactive else TIMEOUT
        if deadline is not None:  # what is left of a bound that several git processes share
            timeout = max(0.5, min(timeout, deadline - time.monotonic()))
        with self._credentials(remote) as cred_env:
            base_env.update(cred_env)
            argv = ["git", "--git-dir", str(self.path), *args]
            try:
                # A session of its own: on the timeout the whole group goes, git's remote helper
                # too, which would otherwise hold the output pipes open (and the caller) until
                # its own stall bound.
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env,
                                        start_new_session=True)
            except FileNotFoundError:
                raise GitError("the git binary is not installed (scripts/services.sh installs it)") from None
            try:
                out, err = proc.communicate(input=input, timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                bound = INTERACTIVE_TIMEOUT if deadline is not None else timeout  # the bound it shares
                raise GitError(f"git {args[0]} gave no answer in {bound:g} s" + (
                    "; the periodic sync goes on trying" if timeout != TIMEOUT else "")) from None
            done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        if check and done.returncode != 0:
            text = done.stderr.decode("utf-8", "replace").strip()
            if self.auth.password:  # git never prints it; a URL typed with it inside could
                text = text.replace(self.auth.password, "***")
            # The server's own folders are nobody's business on a page (viewers read these errors).
            text = text.replace(str(self.path), "the mirror").replace(str(self.path.parent), "the mirrors' folder")
            lines = [line for line in text.splitlines() if line.strip()][-4:]
            rejected = any(m in text for m in ("non-fast-forward", "[rejected]", "fetch first", "stale info"))
            raise GitError(f"git {args[0]}: " + (" ".join(lines) or f"exit status {done.returncode}"),
                           rejected=rejected)
        return done

    @contextmanager
    def _credentials(self, remote: bool):
        if not remote or not (self.auth.password or self.auth.ssh_key):
            yield {}
            return
        with tempfile.TemporaryDirectory(prefix="dynamo-cp-git-") as tmp:
            env = {}
            if self.auth.password:
                askpass = Path(tmp) / "askpass"
                askpass.write_text(_ASKPASS)
                askpass.chmod(stat.S_IRWXU)
                env.update({"GIT_ASKPASS": str(askpass), "DYNAMO_CP_GIT_USER": self.auth.username or "git",
                            "DYNAMO_CP_GIT_PASSWORD": self.auth.password})
            if self.auth.ssh_key:
                key = Path(tmp) / "key"
                key.write_text(self.auth.ssh_key.strip() + "\n")
                key.chmod(stat.S_IRUSR | stat.S_IWUSR)
                env["GIT_SSH_COMMAND"] = self._ssh(f"-i {key} -o IdentitiesOnly=yes")
            yield env

    def stall_seconds(self) -> int:
        return min(INTERACTIVE_STALL_SECONDS, STALL_SECONDS) if self.interactive else STALL_SECONDS

    def _ssh(self, extra: str = "") -> str:
        known = self.path.parent / "known_hosts"
        # The same bound over ssh: no connection in 10 s, or keep-alives of 10 s unanswered for
        # the stall bound (3 of them; 1 when a person waits).
        alive = max(1, self.stall_seconds() // 10)
        return (f"ssh {extra} -o BatchMode=yes -o StrictHostKeyChecking=accept-new "
                f"-o UserKnownHostsFile={known} -o ConnectTimeout=10 -o ServerAliveInterval=10 "
                f"-o ServerAliveCountMax={alive}").replace("  ", " ")

    def _out(self, *args: str, **kw) -> str:
        return self._run(*args, **kw).stdout.decode("utf-8", "replace")

    # -- the mirror ------------------------------------------------------------------------
    @property
    def remote_ref(self) -> str:
        return f"refs/remotes/origin/{self.branch}"

    @contextlib.contextmanager
    def exclusive(self, *, wait: bool = True):
        """One user of this mirror at a time on this host: a lock on a file beside it (released
        if the process dies), which waits without holding anything of the database. With
        ``wait=False`` a mirror in use raises MirrorBusy at once."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / f"{self.path.name}.lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise MirrorBusy from None
            try:
                yield self
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def fetch(self) -> str:
        """Bring the branch up to date; its commit."""
        if not (self.path / "HEAD").exists():
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(["git", "init", "--bare", "-q", str(self.path)], check=True, capture_output=True,
                               timeout=TIMEOUT)
            except (OSError, subprocess.SubprocessError):
                raise GitError("the mirror could not be made on the control plane's disk (full, read-only, or "
                               "something else in its place under var/repos/): see the worker's log") from None
        self._run("config", "remote.origin.url", self.url)
        # Sync now's bound is the whole fetch's: a first fetch that gave up on a stalled host
        # (git's own stall bound, 10 s) left the retry below only what remained of the 12 s.
        # Each given the whole bound, a paused host kept the person waiting 22 s.
        deadline = time.monotonic() + INTERACTIVE_TIMEOUT if self.interactive else None
        done = self._run("fetch", "--quiet", "--prune", "--no-tags", "origin",
                         f"+refs/heads/{self.branch}:{self.remote_ref}", remote=True, check=False, deadline=deadline)
        if done.returncode != 0 and "couldn't find remote ref" in done.stderr.decode("utf-8", "replace"):
            raise GitError(f"the repository has no branch {self.branch!r} (an empty repository has none "
                           "until its first push)")
        if done.returncode != 0:
            if deadline is not None and deadline - time.monotonic() < 1:
                raise GitError(f"git fetch gave no answer in {INTERACTIVE_TIMEOUT} s; the periodic sync goes on "
                               "trying")
            self._run("fetch", "--quiet", "--no-tags", "origin",
                      f"+refs/heads/{self.branch}:{self.remote_ref}", remote=True, deadline=deadline)
        tip = self.tip()
        if tip is None:
            raise GitError(f"the fetch brought no branch {self.branch!r}")
        return tip

    def tip(self) -> str | None:
        done = self._run("rev-parse", "--verify", "--quiet", self.remote_ref + "^{commit}", check=False)
        return done.stdout.decode().strip() or None

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self._run("merge-base", "--is-ancestor", older, newer, check=False).returncode == 0

    def commits_between(self, since: str | None, until: str, path: str) -> list[str]:
        """Commits that touched ``path`` after ``since`` up to ``until``, oldest first."""
        spec = [f"{since}..{until}"] if since else [until]
        out = self._out("rev-list", "--reverse", "--topo-order", *spec, "--", path or ".")
        return out.split()

    def commit(self, sha: str) -> Commit:
        out = self._out("show", "-s", "--format=%H%x00%an%x00%ae%x00%cI%x00%s%x00%b", sha)
        sha, name, email, when, subject, body = (out.split("\x00") + [""] * 6)[:6]
        # Whoever pushes writes these: bounded and printable before anything stores or shows them.
        return Commit(sha.strip()[:40], _line(name, 200), _line(email, 200), _line(when, 40), _line(subject, 1000),
                      _CONTROL.sub("", body.strip())[:10000])

    def changes(self, sha: str, path: str) -> list[Change]:
        """Files under ``path`` that ``sha`` added, modified or deleted against its first parent."""
        out = self._out("diff-tree", "-r", "-z", "--no-commit-id", "--no-renames", "--name-status", "--root",
                        "-m", "--first-parent", sha, "--", path or ".")
        parts = [p for p in out.split("\x00") if p]
        return [Change(parts[i][0], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]

    def files(self, sha: str, path: str) -> dict[str, str]:
        """path -> blob id of every file directly under ``path`` at ``sha``."""
        prefix = path.rstrip("/") + "/" if path else ""
        out = self._out("ls-tree", "-z", sha, "--", prefix or ".")
        found = {}
        for entry in filter(None, out.split("\x00")):
            meta, name = entry.split("\t", 1)
            _mode, kind, blob = meta.split()
            if kind == "blob":
                found[name] = blob
        return found

    def folders(self, sha: str, path: str) -> list[str]:
        """Paths of the folders directly under ``path`` at ``sha``."""
        prefix = path.rstrip("/") + "/" if path else ""
        out = self._out("ls-tree", "-z", "-d", sha, "--", prefix or ".")
        return [entry.split("\t", 1)[1] for entry in filter(None, out.split("\x00"))
                if entry.split()[1] == "tree"]

    def tree_size(self, sha: str, paths: list[str]) -> tuple[int, int]:
        """(files, bytes) of everything under ``paths`` at ``sha``: what an archive of them holds."""
        out = self._out("ls-tree", "-r", "-z", "-l", sha, "--", *paths)
        files = size = 0
        for entry in filter(None, out.split("\x00")):
            meta = entry.split("\t", 1)[0].split()
            files += 1
            size += int(meta[3]) if len(meta) > 3 and meta[3].isdigit() else 0
        return files, size

    def archive(self, sha: str, paths: list[str]) -> bytes:
        """A tar of ``paths`` (folders) at ``sha``, with their repository paths: ``git archive``."""
        return self._run("archive", "--format=tar", sha, "--", *paths).stdout

    def blob_id(self, sha: str, path: str) -> str | None:
        done = self._run("rev-parse", "--verify", "--quiet", f"{sha}:{path}", check=False)
        return done.stdout.decode().strip() or None

    def blob_size(self, blob: str) -> int:
        return int(self._out("cat-file", "-s", blob).strip())

    def read_blob(self, blob: str) -> bytes:
        return self._run("cat-file", "blob", blob).stdout

    def last_commit_of(self, sha: str, path: str, *more: str) -> str:
        """The newest commit up to ``sha`` that changed ``path`` (or any of ``more``)."""
        return self._out("log", "-1", "--format=%H", sha, "--", path, *more).strip() or sha

    def write_file_commit(self, *, parent: str | None, path: str, content: bytes, message: str,
                          author_name: str, author_email: str) -> tuple[str, str]:
        """A new commit: ``parent``'s tree with ``path`` set to ``content``. (commit, blob)."""
        blob = self._out("hash-object", "-w", "--stdin", input=content).strip()
        with tempfile.TemporaryDirectory(prefix="dynamo-cp-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if parent:
                self._run("read-tree", parent, env=env)
            self._run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self._out("write-tree", env=env).strip()
        people = {"GIT_AUTHOR_NAME": author_name, "GIT_AUTHOR_EMAIL": author_email,
                  "GIT_COMMITTER_NAME": "Dynamo Control Plane", "GIT_COMMITTER_EMAIL": "dynamo-cp@localhost"}
        args = ["commit-tree", tree, "-F", "-"] + (["-p", parent] if parent else [])
        commit = self._out(*args, input=message.encode(), env=people).strip()
        return commit, blob

    def push(self, commit: str, branch: str) -> None:
        """Push ``commit`` to ``branch``. Never forced: every commit made here has the branch's
        fetched tip as its parent, so the remote takes it only while that is still its tip, and
        refuses it (``GitError.rejected``) once someone pushed in between."""
        self._run("push", "--quiet", "--porcelain", "origin", f"{commit}:refs/heads/{branch}", remote=True)
        if branch == self.branch:
            self._run("update-ref", self.remote_ref, commit)

    def merge_file(self, ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str]) -> str:
        """The three-way merge of one file in diff3 style: conflicts show all three sides."""
        with tempfile.TemporaryDirectory(prefix="dynamo-cp-merge-") as tmp:
            names = []
            for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
                (Path(tmp) / name).write_bytes(data)
                names.append(str(Path(tmp) / name))
            done = subprocess.run(["git", "merge-file", "-p", "--diff3", "-L", labels[0], "-L", labels[1],
                                   "-L", labels[2], *names], capture_output=True, timeout=TIMEOUT)
        if done.returncode < 0 or done.returncode > 127:
            raise GitError("git merge-file: " + done.stderr.decode("utf-8", "replace").strip())
        return done.stdout.decode("utf-8", "replace")
