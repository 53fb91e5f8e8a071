"""The web server as `make up`, the Dockerfile and deploy/kustomize start it (`manage.py web`,
controlplane/webserver.py), run for real: Debian's nginx in front of two uvicorn processes on
SQLite, over HTTP. Requests, not connections, are spread; a process that dies is started again
while the other serves; the client's address is nginx's peer unless a trusted proxy says
otherwise; a body too large for nginx is refused in words; a page's event stream is passed on
as it comes; a stop leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from controlplane import webserver
from tests.controlplane.test_defaults_http import _free_port, _login, default_env

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw-webserver-1"


def _nginx_or_fail() -> str:
    binary = webserver.nginx_binary()
    if binary is None:
        pytest.fail("no nginx: run scripts/services.sh nginx (Debian's package, unpacked under var/tools)")
    return binary


def _serve(var_dir: Path, workers: int = 2, **env_extra: str):
    env = {**default_env(var_dir), **env_extra}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    for username in ("admin", "locked"):  # "locked": the lockout tests' own, so the others can still sign in
        subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", username,
                        "--email", "a@example.com"], cwd=ROOT, env={**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
                       check=True, capture_output=True)
    port = _free_port()
    log = open(var_dir / "web.log", "w")  # noqa: SIM115 - closed by the caller's teardown
    proc = subprocess.Popen([sys.executable, "manage.py", "web", "--workers", str(workers), "--port", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url, log
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("manage.py web did not serve: " + (var_dir / "web.log").read_text()[-3000:])
        time.sleep(0.3)


def _stop(proc: subprocess.Popen, log) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(40)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


def _backends(proc: subprocess.Popen) -> list[psutil.Process]:
    """The uvicorn processes alive now (one killed is a zombie until the server reaps it)."""
    found = []
    for child in psutil.Process(proc.pid).children():
        try:
            if "uvicorn" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    _nginx_or_fail()
    var_dir = tmp_path_factory.mktemp("web-var")
    proc, url, log = _serve(var_dir)
    yield proc, url, var_dir
    _stop(proc, log)


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def test_nginx_hands_each_request_on_one_connection_to_the_least_busy_process(served):
    proc, url, _ = served
    backends = _backends(proc)
    assert len(backends) == 2
    # The process that watches them holds no Django (each of them holds ~100 MB of it).
    assert psutil.Process(proc.pid).memory_info().rss < 40 * 2**20
    assert any("nginx" in p.name() for p in psutil.Process(proc.pid).children())
    with httpx.Client() as client:  # one keep-alive connection: uvicorn --workers gives it to one worker
        for _ in range(50):  # each process's first requests load what it serves with
            client.get(f"{url}/healthz")
        before = [_cpu(p) for p in backends]
        for _ in range(300):
            assert client.get(f"{url}/healthz").status_code == 200
    spent = [_cpu(p) - b for p, b in zip(backends, before, strict=True)]
    assert min(spent) > 0.25 * sum(spent), f"CPU seconds per process: {spent}"


def test_a_process_that_dies_is_started_again_while_the_other_serves(served):
    proc, url, var_dir = served
    victim = _backends(proc)[0]
    victim.kill()
    with httpx.Client() as client:
        answers = [client.get(f"{url}/healthz").status_code for _ in range(30)]
    assert answers == [200] * 30
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        backends = _backends(proc)
        if len(backends) == 2 and victim.pid not in {p.pid for p in backends}:
            break
        time.sleep(0.3)
    else:
        pytest.fail("the process was not started again: " + (var_dir / "web.log").read_text()[-2000:])
    assert "process 1 stopped" in (var_dir / "web.log").read_text() or "process 2 stopped" in (
        var_dir / "web.log").read_text()


def test_a_body_beyond_what_nginx_takes_is_refused_in_words_and_one_within_reaches_the_product(served):
    _, url, _ = served
    limit = webserver.body_limit()
    response = httpx.post(f"{url}/api/graphs/", content=b"x" * (limit + 1),
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json() == {"detail": f"the request body is larger than {limit} bytes"}
    # Larger than the product's own limit, within nginx's: the product answers, as without nginx.
    response = httpx.post(f"{url}/api/graphs/", content=b"x" * (limit - 1024),
                          headers={"Content-Type": "application/json"})
    assert response.status_code in (401, 403)
    assert "detail" in response.json()


def test_a_client_cannot_name_its_own_address(served):
    """Login throttling counts failures per address: X-Forwarded-For from a client nobody trusts
    does not move it to another one (nginx sends its peer, the processes believe only nginx)."""
    _, url, _ = served
    with httpx.Client() as client:
        for attempt in range(6):  # AXES_FAILURE_LIMIT is 5
            response = _login(client, url, "locked", "wrong", **{"X-Forwarded-For": f"203.0.113.{attempt}"})
        assert "Too many failed logins" in response.text
        response = _login(client, url, "locked", PASSWORD, **{"X-Forwarded-For": "198.51.100.7"})
        assert response.status_code in (403, 429)


def test_a_trusted_proxys_client_address_is_believed_through_nginx(tmp_path):
    """With the proxy in front in FORWARDED_ALLOW_IPS, the client it names is the address, as
    with uvicorn alone: one client locked out, another let in."""
    _nginx_or_fail()
    proc, url, log = _serve(tmp_path, FORWARDED_ALLOW_IPS="127.0.0.1")
    try:
        with httpx.Client() as client:
            for _ in range(6):
                response = _login(client, url, "admin", "wrong", **{"X-Forwarded-For": "203.0.113.1"})
            assert "Too many failed logins" in response.text
        with httpx.Client() as client:
            assert _login(client, url, "admin", PASSWORD, **{"X-Forwarded-For": "198.51.100.7"}).status_code == 302
    finally:
        _stop(proc, log)


def test_a_pages_event_stream_comes_through_as_it_is_sent(served):
    _, url, _ = served
    with httpx.Client() as client:
        assert _login(client, url, "admin", PASSWORD).status_code == 302
        # The stream never ends: buffered by nginx, not a byte of it would arrive.
        with client.stream("GET", f"{url}/graphs/_events/?v=stale", timeout=10) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            seen = ""
            for chunk in response.iter_text():
                seen += chunk
                if "event: rows" in seen:
                    break
            assert re.search(r"event: rows\nid: \S+\ndata: \S+\n\n", seen), seen


def test_a_stop_stops_nginx_and_every_process(tmp_path):
    _nginx_or_fail()
    proc, _, log = _serve(tmp_path)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(_backends(proc)) == 2 and any(p.name() == "nginx" for p in children)
    assert _stop(proc, log) == 0
    _gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [p.cmdline() for p in alive]


def test_a_supervisor_killed_outright_takes_nginx_and_every_process_with_it(tmp_path):
    """SIGKILL (or the OOM killer) gives the supervisor no chance to stop anything: the others
    are stopped by the kernel's word (PR_SET_PDEATHSIG), and the port is free for the next start."""
    _nginx_or_fail()
    proc, url, log = _serve(tmp_path)
    port = int(url.rsplit(":", 1)[1])
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(_backends(proc)) == 2 and any(p.name() == "nginx" for p in children)
    proc.kill()
    proc.wait()
    log.close()
    _gone, alive = psutil.wait_procs(children, timeout=30)
    try:
        assert not alive, [p.cmdline() for p in alive]
    finally:
        for p in alive:
            p.kill()
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nginx binds it
        s.bind(("127.0.0.1", port))  # nothing listens on the port


def test_without_nginx_it_says_so_and_serves_with_uvicorn_alone(tmp_path):
    proc, url, log = _serve(tmp_path, NGINX_BINARY=str(tmp_path / "no-nginx"))
    try:
        assert "no nginx" in (tmp_path / "web.log").read_text()
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert not any("nginx" in p.name() for p in psutil.Process(proc.pid).children(recursive=True))
    finally:
        _stop(proc, log)


def test_the_nginx_configuration_has_every_placeholder_filled(tmp_path):
    conf = webserver.nginx_conf("::", 8000, [1, 2], tmp_path, "")
    assert "listen [::]:8000;" in conf
    assert "server 127.0.0.1:1 max_fails=0; server 127.0.0.1:2 max_fails=0;" in conf
    assert "X-Forwarded-For $remote_addr;" in conf
    assert "X-Forwarded-For $proxy_add_x_forwarded_for;" in webserver.nginx_conf("0.0.0.0", 8000, [1], tmp_path,
                                                                                  "10.0.0.0/8")
    assert "${" not in conf
    binary = _nginx_or_fail()
    (tmp_path / "nginx.conf").write_text(conf.replace("listen [::]:8000", f"listen 127.0.0.1:{_free_port()}"))
    checked = subprocess.run([binary, "-e", "stderr", "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
                             capture_output=True, text=True, env={**os.environ})
    assert checked.returncode == 0, checked.stderr


# The supervisor alone (the standard library only), with stand-ins for uvicorn and nginx: a
# process that listens on its port and then serves for ``life`` seconds, or for good.
LISTENER = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(float(sys.argv[2])); sys.exit(3)")


def _supervise(tmp_path: Path, lives: list[float]) -> tuple[subprocess.Popen, Path]:
    from controlplane import webserver as ws

    ports = ws.free_ports(len(lives))
    plan = {"backends": [[sys.executable, "-c", LISTENER, str(p), str(life)] for p, life in zip(ports, lives,
                                                                                               strict=True)],
            "ports": ports, "cwd": str(tmp_path), "graceful_s": 1,
            "nginx": [sys.executable, "-c", "import time; time.sleep(600)"]}
    log = tmp_path / "supervisor.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(ws.supervisor_command(plan), stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def test_a_process_that_cannot_stay_up_is_retried_with_a_back_off_while_the_others_serve(tmp_path):
    proc, log = _supervise(tmp_path, [600, 0.2])
    try:
        time.sleep(6)
        assert proc.poll() is None, log.read_text()  # the other process serves: the server stays
        text = log.read_text()
        for delay in ("0.5", "1", "2"):
            assert f"process 2 stopped (status 3); starting it again in {delay} s" in text, text
    finally:
        proc.terminate()
        assert proc.wait(15) == 0


def test_when_no_process_can_stay_up_the_server_stops_and_says_why(tmp_path):
    proc, log = _supervise(tmp_path, [0.2, 0.2])
    assert proc.wait(30) == 1
    assert "every process stopped 3 times within 10 s of its start" in log.read_text()
