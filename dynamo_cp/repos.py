"""dynamo-cp repos add|sync|status|list: Git repositories whose manifests are graphs.

Secrets are read from files (--password-file, --ssh-key-file, --webhook-secret-file), never
taken as arguments: a command line shows up in shell history and in ``ps``."""

from __future__ import annotations

import copy
from pathlib import Path

from . import exits
from .client import Client, finding_line
from .exits import CliError
from .output import emit, say, table

MAX_SECRET_BYTES = 16384


def add_parsers(sub, common) -> None:
    repos = sub.add_parser("repos", help="Git repositories whose manifests are graphs", parents=[common])
    verbs = repos.add_subparsers(dest="verb", required=True, metavar="VERB")
    verbs.add_parser("list", help="list repositories and their last sync", parents=[common])
    # Here --url is the repository's: the control plane's comes from DYNAMO_CP_URL, the config
    # file, or --url before the command (`dynamo-cp --url https://cp repos add NAME --url …`).
    # A copy of the shared options: "resolve" then replaces the copy's --url, not everyone's.
    p = verbs.add_parser("add", help="register a repository (admin)", parents=[copy.deepcopy(common)],
                         conflict_handler="resolve")
    p.add_argument("name")
    p.add_argument("--url", dest="repo_url", required=True,
                   help="the repository: https://…, ssh://…, git@host:org/repo.git or file:///…")
    p.add_argument("--branch", default="main")
    p.add_argument("--path", default="", help="the folder of manifests, one graph per *.yaml (default: the root)")
    p.add_argument("--propose", action="store_true",
                   help="push product changes to review branches dynamo-cp/<graph>-r<N>, not to the branch")
    p.add_argument("--username", default="")
    p.add_argument("--password-file", help="a file holding the password or access token (https)")
    p.add_argument("--ssh-key-file", help="a file holding a private key (ssh)")
    p.add_argument("--webhook-secret-file", help="a file holding the push webhook's shared secret")
    p.add_argument("--no-sync", action="store_true", help="register only; the periodic sync reads it later")
    p = verbs.add_parser("sync", help="fetch the branch now; each new commit becomes revisions", parents=[common])
    p.add_argument("name")
    p = verbs.add_parser("status", help="a repository, its files and graphs, and changes on their way to Git",
                         parents=[common])
    p.add_argument("name")


def run(args, client: Client) -> int:
    return globals()[f"do_{args.verb}"](args, client)


def _secret(name: str | None) -> str:
    if not name:
        return ""
    path = Path(name)
    if not path.is_file():
        raise CliError(exits.USAGE, f"{name}: no such file")
    if path.stat().st_size > MAX_SECRET_BYTES:
        raise CliError(exits.USAGE, f"{name}: more than {MAX_SECRET_BYTES:,} bytes is not a credential")
    return path.read_text().strip()


def do_list(args, client: Client) -> int:
    rows = client.pages("/api/repos/")
    emit(rows, args.output, lambda rs: table(
        ["NAME", "BRANCH", "PATH", "MODE", "GRAPHS", "STATE", "COMMIT", "URL"],
        [[r["name"], r["branch"], r["path"] or "/", r["mode"], r["graphs"], r["state"],
          (r["synced_commit"] or "-")[:12], r["url"]] for r in rs]))
    return exits.OK


def _describe_sync(result: dict) -> str:
    counts = result.get("counts", {})
    lines = [f"synced to {(result.get('commit') or 'an empty branch')[:12]}: {counts.get('imported', 0)} revision(s) "
             f"imported, {counts.get('removed', 0)} removed from Git, {counts.get('refused', 0)} refused"]
    lines += [f"  {i['path']}: {i['graph']} revision {i['revision']} ({i['commit'][:12]})" for i in result["imported"]]
    lines += [f"  {i['path']}: {i['graph']} removed from Git in {i['commit'][:12]}" for i in result["removed"]]
    for r in result.get("refused", []):
        lines.append(f"  {r['path']}: refused at {r['commit'][:12]}")
        lines += [f"    {finding_line(f)}" for f in r["findings"]]
    return "\n".join(lines)


def do_add(args, client: Client) -> int:
    body = {"name": args.name, "url": args.repo_url, "branch": args.branch, "path": args.path,
            "mode": "propose" if args.propose else "direct", "username": args.username,
            "password": _secret(args.password_file), "ssh_key": _secret(args.ssh_key_file),
            "webhook_secret": _secret(args.webhook_secret_file)}
    repo = client.post("/api/repos/", json=body)
    say(f"registered {repo['name']} ({repo['url']} {repo['branch']}:{repo['path'] or '/'})")
    if args.no_sync:
        emit(repo, args.output, lambda r: f"{r['name']}: not synced yet")
        return exits.OK
    return _sync(args, client)


def _sync(args, client: Client) -> int:
    response = client.http.post(f"/api/repos/{args.name}/sync/")
    if response.status_code == 409 and "error" in response.json():  # git could not fetch: the body says why
        result = response.json()
        emit(result, args.output, lambda r: f"sync failed: {r['error']}")
        return exits.UNAVAILABLE
    if not response.is_success:
        raise client._error(response)
    result = response.json()
    emit(result, args.output, _describe_sync)
    return exits.INVALID if result.get("refused") else exits.OK


def do_sync(args, client: Client) -> int:
    return _sync(args, client)


def do_status(args, client: Client) -> int:
    repo = client.get(f"/api/repos/{args.name}/")
    links = client.pages(f"/api/repos/{args.name}/links/")
    exports = client.pages(f"/api/repos/{args.name}/exports/", limit=20)
    data = {**repo, "links": links, "exports": exports}

    def text(d: dict) -> str:
        head = (f"{d['name']}: {d['url']} {d['branch']}:{d['path'] or '/'} ({d['mode']})\n"
                f"sync: {d['state']}" + (f" at {d['synced_commit'][:12]}" if d["synced_commit"] else "")
                + (f": {d['error']}" if d["error"] else "") + "\n")
        files = table(["FILE", "GRAPH", "STATE", "COMMIT"],
                      [[x["path"], x["graph"], x["state"], (x["commit"] or "-")[:12]] for x in d["links"]])
        for x in d["links"]:
            if x["state"] == "invalid":
                files += f"{x['path']}: refused at {x['refused_commit'][:12]}\n"
                files += "".join(f"  {finding_line(f)}\n" for f in x["findings"])
        out = head + files
        if d["exports"]:
            out += table(["GRAPH", "REV", "STATE", "BRANCH", "COMMIT"],
                         [[e["graph"], e["revision"], e["state"], e["branch"] or "-", (e["commit"] or "-")[:12]]
                          for e in d["exports"]])
        return out

    emit(data, args.output, text)
    return exits.OK
