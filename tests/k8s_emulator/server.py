"""The HTTP layer: routing, discovery, authentication, fault injection, request recording, chunked
watch streams. Stdlib ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import openapi, openapi_pb
from .errors import ApiError, status_body
from .request import Request

VERSION_INFO = {
    "major": "1", "minor": "31", "gitVersion": "v1.31.0", "gitCommit": "k8s-emulator", "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64",
}


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any
    headers: dict[str, str]
    status: int | None = None

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None


@dataclass
class RawBody:
    """An answer sent as is (the protobuf OpenAPI document)."""

    data: bytes
    content_type: str


@dataclass
class Fault:
    """One injected failure; see :meth:`KubeEmulator.inject`."""

    method: str
    pattern: re.Pattern[str]
    status: int | None
    times: int | None = 1
    retry_after: int | None = None
    delay: float | None = None
    body: dict[str, Any] | None = None
    drop: bool = False
    hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, method: str, path: str) -> bool:
        if self.method not in ("*", method) or not self.pattern.search(path):
            return False
        with self.lock:
            if self.times is not None and self.hits >= self.times:
                return False
            self.hits += 1
            return True


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, emu: Any, host: str = "127.0.0.1"):
        self.emu = emu
        super().__init__((host, 0), Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorHTTPServer

    def setup(self) -> None:
        super().setup()
        # headers and body are separate writes: without this, Nagle + delayed ACK add 40 ms per request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- main path ---------------------------------------------------------------------------------
    def _handle(self, method: str) -> None:
        emu = self.server.emu
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        record = RecordedRequest(method, url.path, query, ctype, _decode(raw, ctype), dict(self.headers))
        emu.record(record)
        try:
            user = emu.authenticate(self.headers.get("Authorization") or "")
            fault = emu.take_fault(method, url.path)
            if fault is not None and self._fault(fault, record):
                return
            exec_path = _EXEC.match(url.path)
            if exec_path and (self.headers.get("Upgrade") or "").lower() == "websocket":
                record.status = 101
                self._exec(exec_path.group(1), exec_path.group(2), query)
                return
            req_warnings: list[str] = []
            code, body = self._route(method, url.path, {k: v[-1] for k, v in query.items()}, raw, ctype,
                                     req_warnings, user)
            record.status = code
            self._send(code, body, warnings=req_warnings)
        except ApiError as err:
            record.status = err.code
            self._send(err.code, err.body, err.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            emu.errors.append(traceback.format_exc())
            record.status = 500
            self._send(500, status_body(500, f"Internal error occurred: {exc!r}"))

    def _exec(self, namespace: str, name: str, query: dict[str, list[str]]) -> None:
        """``pods/exec`` as the API server streams it: a WebSocket in the v4.channel.k8s.io
        protocol, one byte of channel before each message (1 stdout, 2 stderr, 3 the status)."""
        emu = self.server.emu
        pod = emu.store.get(("", "pods"), namespace, name)
        if pod is None:
            raise ApiError(404, f'pods "{name}" not found', "NotFound")
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers", [])]
        container = (query.get("container") or [containers[0] if containers else ""])[-1]
        if container not in containers:
            raise ApiError(400, f"container {container} is not valid for pod {name}")
        handler = emu.pod_exec.get((namespace, name))
        command = query.get("command") or []
        out, err, code = handler(command) if handler else ("", f"exec: {command[:1]}: not found\n", 127)
        key = self.headers.get("Sec-WebSocket-Key") or ""
        accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode(), usedforsecurity=False).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        status = {"metadata": {}, "status": "Success"} if code == 0 else {
            "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: error executing command {command}, exit "
                       f"code {code}", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        for channel, data in ((1, out.encode()), (2, err.encode()), (3, json.dumps(status).encode())):
            if data:
                self.wfile.write(_ws_frame(bytes([channel]) + data, opcode=2))
        self.wfile.write(_ws_frame((1000).to_bytes(2, "big"), opcode=8))
        self.wfile.flush()
        self.close_connection = True

    def _fault(self, fault: Fault, record: RecordedRequest) -> bool:
        if fault.delay:
            time.sleep(fault.delay)
        if fault.drop:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            record.status = -1
            return True
        if fault.status is None:
            return False
        headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
        record.status = fault.status
        self._send(fault.status, fault.body or status_body(fault.status), headers)
        return True

    def _route(self, method: str, path: str, query: dict[str, str], raw: bytes, ctype: str,
               warnings: list[str], user: str) -> tuple[int, Any]:
        emu = self.server.emu
        registry = emu.registry
        segs = [s for s in path.split("/") if s]
        discovery = self._discovery(segs)
        if discovery is not None:
            if method != "GET":
                raise ApiError(405)
            return 200, discovery
        if segs[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", segs[2:]
        elif len(segs) >= 4 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise ApiError(404)
        if rest and rest[0] == "watch":
            rest, query = rest[1:], {**query, "watch": "true"}
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and registry.lookup(group, version, rest[2]):
            namespace, rest = rest[1], rest[2:]
        if not 1 <= len(rest) <= 3:
            raise ApiError(404)
        res = registry.lookup(group, version, rest[0])
        if res is None or (namespace is not None and not res.namespaced):
            raise ApiError(404)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        req = Request(method, res, version, namespace, name, sub, query, raw, ctype,
                      self.headers.get("User-Agent") or "", warnings, user)
        if res.namespaced and namespace is None and (name is not None or method == "POST"):
            raise ApiError(404)
        return emu.api.handle(req)

    def _discovery(self, segs: list[str]) -> Any:
        registry = self.server.emu.registry
        if segs == ["version"]:
            return VERSION_INFO
        if segs in (["healthz"], ["livez"], ["readyz"]):
            return "ok"
        if segs[:1] == ["openapi"]:
            return self._openapi(segs[1:])
        if segs == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.server.server_port}"}]}
        if segs == ["api", "v1"]:
            return registry.resource_list("", "v1")
        if segs == ["apis"]:
            return registry.api_group_list()
        if len(segs) == 2 and segs[0] == "apis":
            return registry.api_group(segs[1]) or _raise(404)
        if len(segs) == 3 and segs[0] == "apis":
            return registry.resource_list(segs[1], segs[2]) or _raise(404)
        return None

    def _openapi(self, segs: list[str]) -> Any:
        registry = self.server.emu.registry
        if segs == ["v2"]:
            doc = openapi.v2_document(registry)
            if "protobuf" in (self.headers.get("Accept") or ""):
                return RawBody(openapi_pb.document(doc), openapi_pb.CONTENT_TYPE)
            return doc
        if segs == ["v3"]:
            return openapi.v3_root(registry)
        if len(segs) == 4 and segs[:2] == ["v3", "apis"]:
            return openapi.v3_document(registry, segs[2], segs[3]) or _raise(404)
        return _raise(404)

    # -- responses ---------------------------------------------------------------------------------
    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None,
              warnings: list[str] | None = None) -> None:
        if hasattr(body, "__next__"):
            self._stream(body, warnings or [])
            return
        if isinstance(body, RawBody):
            data, ctype = body.data, body.content_type
        elif isinstance(body, str):
            data, ctype = body.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(body).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(self.server.emu.next_audit_id()))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        for text in warnings or []:
            self.send_header("Warning", f"299 - {json.dumps(text)}")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, events: Any, warnings: list[str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        for text in warnings:
            self.send_header("Warning", f"299 - {json.dumps(text)}")
        self.end_headers()
        try:
            for event in events:
                line = (json.dumps(event) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        finally:
            events.close()


_EXEC = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec$")
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455


def _ws_frame(payload: bytes, opcode: int) -> bytes:
    """One unmasked server-to-client WebSocket frame (RFC 6455, section 5.2)."""
    size = len(payload)
    if size < 126:
        head = bytes([0x80 | opcode, size])
    elif size < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + size.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + size.to_bytes(8, "big")
    return head + payload


def _raise(code: int) -> Any:
    raise ApiError(code)


def _decode(raw: bytes, ctype: str) -> Any:
    if not raw:
        return None
    try:
        if "yaml" in ctype:
            import yaml

            return yaml.safe_load(raw)
        return json.loads(raw)
    except Exception:
        return raw.decode(errors="replace")
