"""A tiny S3 look-alike on 127.0.0.1 for the conditional-PUT check: it keeps objects in a dict and records requests.

With ``honour=False`` it accepts every PUT, ``If-None-Match: *`` or not: the behaviour that loses Lance commits.
It checks no signature; it exists to show what the store does with an endpoint like that, not to store data.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class FakeS3:
    honour: bool
    port: int = 0
    objects: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, If-None-Match)

    @property
    def storage_options(self) -> dict[str, str]:
        return {
            "aws_access_key_id": "fake",
            "aws_secret_access_key": "fake",
            "aws_endpoint": f"http://127.0.0.1:{self.port}",
            "aws_region": "us-east-1",
            "allow_http": "true",
        }


def _handler(fake: FakeS3) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("ETag", '"0"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:  # noqa: N802
            condition = self.headers.get("If-None-Match")
            fake.requests.append(("PUT", self.path, condition))
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if fake.honour and condition == "*" and self.path in fake.objects:
                return self._reply(412, b"<Error><Code>PreconditionFailed</Code></Error>")
            fake.objects[self.path] = body
            self._reply(200)

        def do_POST(self) -> None:  # noqa: N802  # a multi-object delete (`POST /bucket?delete`)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            bucket = self.path.split("?", 1)[0].rstrip("/")
            for key in re.findall(rb"<Key>(.*?)</Key>", body):
                fake.requests.append(("DELETE", f"{bucket}/{key.decode()}", None))
                fake.objects.pop(f"{bucket}/{key.decode()}", None)
            self._reply(200, b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult></DeleteResult>')

        def do_GET(self) -> None:  # noqa: N802
            fake.requests.append(("GET", self.path, None))
            if self.path in fake.objects:
                return self._reply(200, fake.objects[self.path])
            self._reply(404, b"<Error><Code>NoSuchKey</Code></Error>")

    return Handler


@contextmanager
def fake_s3(*, honour: bool) -> Iterator[FakeS3]:
    fake = FakeS3(honour=honour)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
