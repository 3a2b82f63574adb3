"""``/metrics``: what an operator watches, in the Prometheus text format (0.0.4); no API key, like the probes.

- ``engram_http_requests_total{method, route, status}``: requests answered, by route template
  (``/v1/memories/{memory_id}``, never the raw path: ids would make a series per memory; a path no route
  matched counts as ``unmatched``);
- ``engram_http_request_duration_seconds{method, route}``: their latency, a histogram (:data:`BUCKETS`);
- ``engram_remember_total{outcome}``: the write path's answers (``created``, ``exact_duplicate``,
  ``semantic_duplicate``), and ``engram_remember_contradictions_total``: contradictions found at write time.
  A refused versioned update is a 409 of ``PATCH /v1/memories/{memory_id}`` in the request counter.

The counters live in the process (one :class:`Metrics` per app): each API process is scraped on its own, and
a restart starts them at 0, which Prometheus's ``rate()`` expects. No client library: the format is a few
lines of text (:mod:`engram_pipeline.prometheus`, which the passes' metrics share).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from engram_pipeline.prometheus import CONTENT_TYPE, Labels, labels, number

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # seconds; +Inf is implied


class Metrics:
    """Counters and latency histograms of one API process, safe to update from the threads that serve."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self._histograms: dict[str, dict[Labels, list[float]]] = defaultdict(dict)  # bucket counts, then sum

    def count(self, name: str, amount: float = 1, **labels: str) -> None:
        with self._lock:
            self._counters[name][tuple(sorted(labels.items()))] += amount

    def observe(self, name: str, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            cells = self._histograms[name].setdefault(key, [0.0] * (len(BUCKETS) + 2))
            for i, bound in enumerate(BUCKETS):
                if value <= bound:
                    cells[i] += 1
            cells[len(BUCKETS)] += 1  # +Inf, which is also the count
            cells[len(BUCKETS) + 1] += value

    def render(self) -> str:
        """Every series in the Prometheus text format."""
        lines: list[str] = []
        with self._lock:
            for name, series in sorted(self._counters.items()):
                lines.append(f"# TYPE {name} counter")
                lines += [f"{name}{labels(key)} {number(value)}" for key, value in sorted(series.items())]
            for name, histograms in sorted(self._histograms.items()):
                lines.append(f"# TYPE {name} histogram")
                for key, cells in sorted(histograms.items()):
                    for bound, cumulative in zip((*BUCKETS, "+Inf"), cells, strict=False):
                        le = bound if isinstance(bound, str) else f"{bound:g}"
                        lines.append(f"{name}_bucket{labels((*key, ('le', le)))} {number(cumulative)}")
                    lines.append(f"{name}_sum{labels(key)} {cells[-1]!r}")
                    lines.append(f"{name}_count{labels(key)} {number(cells[len(BUCKETS)])}")
        return "\n".join(lines) + "\n"


class MetricsMiddleware:
    """Counts and times every HTTP request by method, route template and status (a plain ASGI middleware:
    it sees the route the router chose, which it records in the scope, once the request is answered)."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # an exception that escapes every handler is answered 500 outside this middleware

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = str(scope.get("method", ""))
            self.metrics.count("engram_http_requests_total", method=method, route=route, status=str(status))
            self.metrics.observe(
                "engram_http_request_duration_seconds", time.perf_counter() - start, method=method, route=route
            )


router = APIRouter(tags=["probes"])


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus metrics of this API process (text format 0.0.4)."""
    return PlainTextResponse(request.app.state.metrics.render(), media_type=CONTENT_TYPE)
