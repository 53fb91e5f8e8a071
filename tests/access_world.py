"""The access matrix's machinery: a world in which every operation of the product can succeed,
a digest of the whole database, and the checker that sends each operation as each role.

The checker runs each request inside a savepoint that is rolled back afterwards, so every
request meets the same world: an allowed delete does not take the graph away from the next
role. A refused request must leave the database exactly as it was (the digest of every row of
every table, before and after)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from django.apps import apps
from django.db import transaction

# Who asks, from nobody to the most trusted. "norole": signed in, in no role group.
WHO = ("anonymous", "norole", "viewer", "operator", "admin")
RANK = {who: rank for rank, who in enumerate(WHO)}
ROLE_OF = {1: "viewer", 2: "operator", 3: "admin"}  # accounts.roles.Role values

# The product's words for a refusal (asserted exactly, so a refusal for another reason, a 404
# or a 415 from an empty body, does not pass for a role check).
API_ANONYMOUS = "Authentication credentials were not provided."
RANKED = ("viewer", "operator", "admin")


def page_refused(role_name: str) -> str:
    return f"This needs the {role_name} role."


def api_refused(role_name: str, who: str) -> str:
    """accounts.roles.RolePermission's refusal: the role the call needs, and the caller's own."""
    return f"This needs the {role_name} role" + (f"; you have the {who} role." if who in RANKED else ".")


# Columns that a request writes whoever asks and whatever it is refused: the token's "last used"
# (authentication, before any role check) and the user's last login.
VOLATILE = {("accounts", "apitoken"): {"last_used_at"}, ("auth", "user"): {"last_login"}}


def database_digest() -> str:
    """A hash of every row of every table (sessions aside: a login writes them)."""
    digest = hashlib.sha256()
    for model in sorted(apps.get_models(), key=lambda m: m._meta.label):
        meta = model._meta
        if meta.label == "sessions.Session" or meta.proxy or not meta.managed:
            continue
        skip = VOLATILE.get((meta.app_label, meta.model_name), set())
        names = [f.attname for f in meta.concrete_fields if f.attname not in skip]
        digest.update(meta.label.encode())
        for row in model._base_manager.order_by("pk").values_list(*names):
            digest.update(repr(row).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Op:
    """One operation: ``path`` is its URL template as the OpenAPI schema writes it (``{name}``)
    or, for pages, as the URL configuration does (converted to ``{name}``); ``least`` the least
    role allowed (1 viewer, 2 operator, 3 admin); ``ok`` the exact status of a success;
    ``values`` names the world's object behind each path parameter; ``body`` builds the
    request's keyword arguments from the world and the asking role.

    ``public`` names an operation that is anonymous by design and authenticates by its own
    means (a webhook's shared secret, the sign-in's own protocol): every caller, anonymous
    included, must get exactly ``ok``, and the text says why it is public. ``refusals`` gives,
    per caller, the product's words where a page refuses in its own (a page readable by all,
    one of whose actions needs more)."""

    method: str
    path: str
    least: int
    ok: int
    values: dict = field(default_factory=dict)
    body: object = None
    public: str = ""
    refusals: dict = field(default_factory=dict)

    @property
    def is_api(self) -> bool:
        return self.path.startswith("/api/")

    def url(self, world: dict, who: str) -> str:
        def value(match: re.Match) -> str:
            key = self.values.get(match.group(1), match.group(1))
            found = world[key]
            return str(found[who] if isinstance(found, dict) else found)

        return re.sub(r"\{(\w+)\}", value, self.path)

    def kwargs(self, world: dict, who: str) -> dict:
        if self.body is None:
            return {}
        return self.body(world, who) if callable(self.body) else dict(self.body)


def send(client, op: Op, world: dict, who: str):
    kwargs = op.kwargs(world, who)
    query = kwargs.pop("query", "")
    url = op.url(world, who) + (f"?{query}" if query else "")
    return getattr(client, op.method.lower())(url, follow=False, **kwargs)


def _refusal_problem(op: Op, who: str, url: str, response) -> str:
    """What is wrong with a refusal's answer, or ''."""
    status = response.status_code
    if who == "anonymous" and op.is_api:
        detail = _detail(response)
        ok = status == 401 and detail == API_ANONYMOUS
        return "" if ok else f"expected 401 {API_ANONYMOUS!r}, got {status} {detail!r}"
    if who == "anonymous":
        location = response.get("Location", "")
        expected = f"/login/?next={quote(url, safe='/')}"
        ok = status == 302 and location.startswith(expected)
        return "" if ok else f"expected a redirect to {expected}, got {status} {location}"
    if op.is_api:
        detail = _detail(response)
        expected = api_refused(ROLE_OF[op.least], who)
        ok = status == 403 and detail == expected
        return "" if ok else f"expected 403 {expected!r}, got {status} {detail!r}"
    text = response.content.decode(errors="replace")
    message = op.refusals.get(who) or page_refused(ROLE_OF[op.least])
    return "" if status == 403 and message in text else f"expected 403 with {message!r}, got {status}"


def _why(response) -> str:
    """The answer's own explanation: a form's errors, an alert, or the start of the body."""
    text = response.content.decode(errors="replace")
    found = re.findall(r'class="errorlist[^>]*>(.*?)</ul>|role="alert"[^>]*>(.*?)</', text, re.S)
    return " | ".join(re.sub(r"<[^>]+>", " ", a or b).strip() for a, b in found) or text[:300]


def _detail(response) -> str:
    if "json" not in response.get("Content-Type", ""):
        return response.content[:200].decode(errors="replace")
    body = json.loads(response.content)
    return str(body.get("detail", "")) if isinstance(body, dict) else str(body)[:200]


def matrix_problems(ops: list[Op], world: dict, clients: dict, roles: tuple[str, ...] = WHO) -> list[str]:
    """Send every operation as each of ``roles``; return what differs from the matrix.
    ``clients``: who -> (page client, API client)."""
    baseline = database_digest()
    problems = []
    from audit.models import AuditRecord

    last_audit = AuditRecord.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    recorded = audit_leaks(world.get("canaries", {}), {}, since=0)  # what the world's making wrote
    if recorded:
        problems.append(f"the audit log holds {', '.join(recorded)} before any operation")
    for op in ops:
        for who in roles:
            page_client, api_client = clients[who]
            client = api_client if op.is_api else page_client
            allowed = bool(op.public) or RANK[who] >= op.least + 1  # norole ranks 1, viewer 2...
            cookies = copy.deepcopy(client.cookies)
            with transaction.atomic():
                response = send(client, op, world, who)
                url = op.url(world, who)
                leaked = leaks(response, op.kwargs(world, who), world.get("canaries", {}))
                if leaked:
                    problems.append(f"{who} {op.method} {url}: the answer holds {', '.join(leaked)}")
                recorded = audit_leaks(world.get("canaries", {}), op.kwargs(world, who), since=last_audit)
                if recorded:
                    problems.append(f"{who} {op.method} {url}: an audit row holds {', '.join(recorded)}")
                if allowed:
                    if response.status_code != op.ok:
                        problems.append(f"{who} {op.method} {url}: expected {op.ok}, got {response.status_code} "
                                        f"{_why(response)}")
                else:
                    wrong = _refusal_problem(op, who, url, response)
                    if wrong:
                        problems.append(f"{who} {op.method} {url}: {wrong}")
                    elif database_digest() != baseline:
                        problems.append(f"{who} {op.method} {url}: refused, yet the database changed")
                transaction.set_rollback(True)
            # A failed sign-in flushes the session (rolled back above) and hands the client a new
            # cookie: the old one, restored, keeps the caller signed in for the next operation.
            client.cookies = cookies
    return problems


def leaks(response, sent: dict, canaries: dict[str, str]) -> list[str]:
    """The secrets (``canaries``: what -> a value seeded where that secret lives) an answer
    holds, in its headers or body, that its own request did not send."""
    if not canaries:
        return []
    if getattr(response, "streaming", False):
        body = b"".join(response.streaming_content)
        response.streaming_content = [body]  # read once: give it back for the checks after
    else:
        body = response.content
    text = body.decode("utf-8", "replace") + "\n" + "\n".join(f"{k}: {v}" for k, v in response.items())
    own = repr(sent)
    return sorted(what for what, value in canaries.items() if value in text and value not in own)


def audit_leaks(canaries: dict[str, str], sent: dict, since: int) -> list[str]:
    """The secrets the audit rows after ``since`` (a primary key) hold."""
    if not canaries:
        return []
    from audit.models import AuditRecord

    text = "\n".join(json.dumps(row, default=str) for row in AuditRecord.objects.filter(pk__gt=since).values())
    own = repr(sent)
    return sorted(what for what, value in canaries.items() if value in text and value not in own)


def write_file(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)
