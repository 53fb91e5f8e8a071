"""The web server, as every way of starting the product runs it (``manage.py web``: ``make up``,
the Dockerfile, deploy/kustomize).

One process per core, each a single-worker uvicorn on a loopback port, behind Debian's nginx,
which hands each *request* to the least busy one (``least_conn``). ``uvicorn --workers N``
hands out *connections* instead: each worker accepts what it can, and one often takes most of
a burst of keep-alive connections while the other idles. Measured with 8 clients on 2 cores
at 5,000 graphs, the same page's throughput then went from round to round between two levels
(bench/pages_http.py; README's table has the figures this server gets).

* One core, or nginx nowhere to be found: uvicorn alone (``--workers N``), as before, and it
  says why.
* A process that stops is started again (nginx sends requests to the others meanwhile), by a
  supervisor that holds no Django (controlplane/websupervisor.py: ``manage.py web`` works out
  the plan here, then becomes it).
* The client's address (login throttling, the audit log): nginx sends its TCP peer as
  X-Forwarded-For, and the processes believe X-Forwarded-For only from nginx. With proxies in
  FORWARDED_ALLOW_IPS, nginx appends the peer to the chain they sent and the processes walk it
  back past those proxies (uvicorn's own rule), as uvicorn alone did.
* SIGTERM or SIGINT: nginx stops taking connections and finishes the requests it has (up to
  20 s), the processes finish theirs (``--timeout-graceful-shutdown``)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import socket
import sys
from pathlib import Path
from string import Template

from django.conf import settings

# Keep-alive outlives the client's idle timeout (browsers, ingress-nginx's 60 s upstream
# keep-alive), so the client closes an idle connection first: with uvicorn's 5 s, a request
# sent as the server closes is reset, and a form POST is not retried. On a busy host a worker
# can miss uvicorn's 5 s healthcheck (uvicorn alone, --workers); its supervisor then kills it
# mid-request (SIGKILL).
WEB_TIMEOUTS = ("--timeout-keep-alive", "75", "--timeout-worker-healthcheck", "30")
TEMPLATE = Path(__file__).with_name("web-nginx.conf")
SUPERVISOR = Path(__file__).with_name("websupervisor.py")


def nginx_binary() -> str | None:
    """NGINX_BINARY, else nginx on PATH, else Debian's package unpacked in TOOLS_DIR
    (``scripts/services.sh nginx``), else /usr/sbin/nginx; None when there is none."""
    configured = os.environ.get("NGINX_BINARY", "")
    candidates = [configured] if configured else [
        shutil.which("nginx"), str(Path(settings.TOOLS_DIR) / "usr" / "sbin" / "nginx"), "/usr/sbin/nginx"]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def uvicorn_command(host: str, port: int, *, workers: int = 1, trusted: str = "",
                    graceful_s: int | None = None) -> list[str]:
    """uvicorn as it ships (uvloop and httptools, which it picks itself). It believes
    X-Forwarded-For only from ``trusted`` (FORWARDED_ALLOW_IPS for uvicorn alone: none by
    default, where uvicorn would trust any client on 127.0.0.1)."""
    argv = [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", host, "--port", str(port),
            "--no-access-log", *WEB_TIMEOUTS]
    if workers > 1:
        argv += ["--workers", str(workers)]
    if graceful_s is not None:
        argv += ["--timeout-graceful-shutdown", str(graceful_s)]
    trusted = trusted.strip()
    return argv + (["--proxy-headers", "--forwarded-allow-ips", trusted] if trusted else ["--no-proxy-headers"])


def body_limit() -> int:
    """What nginx lets through: more than every body the product reads, which then says itself
    what is too large and where (a form, a manifest, a chat request)."""
    return max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.PLAYGROUND_MAX_PROMPT_BYTES) + 1024 * 1024


def nginx_conf(listen_host: str, port: int, backends: list[int], prefix: Path, proxies: str) -> str:
    listen = f"[{listen_host}]:{port}" if ":" in listen_host else f"{listen_host}:{port}"
    conf = Template(TEMPLATE.read_text()).safe_substitute(  # nginx's own $variables stay
        listen=listen, prefix=str(prefix), body_limit=str(body_limit()),
        servers=" ".join(f"server 127.0.0.1:{p} max_fails=0;" for p in backends),
        # No proxy is believed: the client is nginx's peer, whatever X-Forwarded-For it sent.
        forwarded_for="$proxy_add_x_forwarded_for" if proxies.strip() else "$remote_addr",
        # Started by root, nginx would serve as nobody, who cannot write its own temporary files:
        # it serves as the user the product's processes run as.
        user=f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};" if os.geteuid() == 0
        else "")
    if "${" in conf:
        raise ValueError(f"{TEMPLATE} has a placeholder nobody fills: {conf[conf.index('${'):][:40]}")
    return conf


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()




def plan(host: str, port: int, workers: int, nginx: str, graceful_s: int | None = None) -> dict:
    """What controlplane/websupervisor.py starts: ``workers`` uvicorn processes on free loopback
    ports, believing X-Forwarded-For from nginx (and the proxies it believes), then nginx with its
    configuration written under VAR_DIR."""
    proxies = settings.FORWARDED_ALLOW_IPS
    trusted = ",".join(filter(None, ["127.0.0.1", proxies.strip()]))
    ports = free_ports(workers)
    # One folder per port, made anew at each start: a folder per start piled up under var/.
    prefix = Path(settings.VAR_DIR) / f"web-nginx-{port}"
    shutil.rmtree(prefix, ignore_errors=True)
    prefix.mkdir(parents=True)
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_conf(host, port, ports, prefix, proxies))
    return {"backends": [uvicorn_command("127.0.0.1", p, trusted=trusted, graceful_s=graceful_s) for p in ports],
            "ports": ports, "cwd": str(settings.BASE_DIR), "graceful_s": graceful_s,
            "nginx": [nginx, "-e", "stderr", "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"]}


def supervisor_command(the_plan: dict) -> list[str]:
    """The supervisor, run by path in isolated mode: no Django, no Celery, no application."""
    return [sys.executable, "-I", str(SUPERVISOR), json.dumps(the_plan)]
