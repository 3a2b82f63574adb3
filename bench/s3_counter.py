"""A counting HTTP proxy in front of an S3 endpoint: how many object-store requests a piece of work makes.

    with CountingProxy("http://127.0.0.1:8000") as proxy:    # forwards to the RGW, counts every request
        options = {**storage_options, "aws_endpoint": proxy.endpoint}
        ...                                                    # open a store with ``options`` and work on it
        print(proxy.take())                                    # counts since the last take(), then reset

Requests are forwarded unchanged (the ``Host`` header included, so AWS signatures still verify) over one
keep-alive connection per proxy thread; each is counted by operation (``GET``, ``HEAD``, ``PUT``, ``LIST``,
``DELETE``, ``POST``), by table (the ``*.lance`` path component) and by what it touched in the table
(``manifest`` under ``_versions``, ``transaction``, ``data``, ``index``, ``deletion``, ``other``), with the
time the upstream took. The proxy adds a little latency of its own: time with it off, count with it on.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
TABLE = re.compile(r"/([^/]+)\.lance(?:/|$)")


def classify(method: str, target: str) -> tuple[str, str, str]:
    """(operation, table, part) of one S3 request line."""
    url = urlsplit(target)
    query = parse_qs(url.query, keep_blank_values=True)
    op = "LIST" if method == "GET" and ("list-type" in query or "prefix" in query or "delimiter" in query) else method
    path = url.path
    if op == "LIST":
        path = f"{path}/{query.get('prefix', [''])[0]}"
    m = TABLE.search(path)
    table = m.group(1) if m else "-"
    rest = path[m.end() :] if m else path
    if rest.startswith("_versions"):
        part = "manifest"
    elif rest.startswith("_transactions"):
        part = "transaction"
    elif rest.startswith("data"):
        part = "data"
    elif rest.startswith("_indices"):
        part = "index"
    elif rest.startswith("_deletions"):
        part = "deletion"
    else:
        part = "other"
    return op, table, part


class CountingProxy:
    """Forward HTTP to ``upstream`` (``http://host:port``) and count the requests; a context manager."""

    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.lock = threading.Lock()
        self.ops: Counter[str] = Counter()
        self.parts: Counter[tuple[str, str, str]] = Counter()
        self.seconds: Counter[str] = Counter()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # or each response waits ~40 ms on the client's delayed ACK

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                began = time.perf_counter()
                conn = getattr(self.server, "_conns", {}).get(threading.get_ident())
                for attempt in (0, 1):
                    if conn is None:
                        conn = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                        self.server._conns[threading.get_ident()] = conn  # type: ignore[attr-defined]
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                        break
                    except (http.client.HTTPException, OSError):
                        conn.close()
                        conn = None
                        if attempt:
                            raise
                elapsed = time.perf_counter() - began
                proxy._count(self.command, self.path, elapsed)
                self.send_response_only(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                if self.command == "HEAD":
                    self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD" and data:
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server._conns = {}  # type: ignore[attr-defined]
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _count(self, method: str, target: str, seconds: float) -> None:
        op, table, part = classify(method, target)
        with self.lock:
            self.ops[op] += 1
            self.parts[(op, table, part)] += 1
            self.seconds[op] += seconds

    def take(self) -> dict[str, Any]:
        """The counts since the last call (``ops``, ``parts``, ``seconds``, ``total``), then start afresh."""
        with self.lock:
            out = {
                "total": sum(self.ops.values()),
                "ops": dict(self.ops),
                "parts": dict(self.parts),
                "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            }
            self.ops.clear()
            self.parts.clear()
            self.seconds.clear()
        return out

    def __enter__(self) -> CountingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
