"""``/metrics`` scraped from a real uvicorn server process (``python -m engram_pipeline.api``): the requests it
answered are counted by method, route template and status, timed in a histogram, and the write path's
outcomes are counted; the body parses as the Prometheus text format."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from api_helpers import Server

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def parse(text: str) -> dict[str, float]:
    """Every sample line as ``{'name{labels}': value}``; fails on a line the text format does not allow."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            assert not line or re.match(r"^# (TYPE|HELP) \S+ ", line), line
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples


def test_metrics_from_a_running_server(store_uri: str, tmp_path: Path) -> None:
    server = Server(store_uri, tmp_path, keys="client:tok-c:a1")
    server.start()
    base, auth = server.base, {"Authorization": "Bearer tok-c"}
    try:
        with httpx.Client(base_url=base, headers=auth, timeout=30) as client:
            created = client.post("/v1/memories", json={"agent_id": "a1", "content": "Tea at five"})
            assert created.status_code == 201, created.text
            again = client.post("/v1/memories", json={"agent_id": "a1", "content": "Tea at five"})
            assert again.status_code == 200 and again.json()["outcome"] == "exact_duplicate"
            memory = created.json()["memory"]
            stale = client.patch(f"/v1/memories/{memory['id']}", json={"content": "x", "expected_version": 99})
            assert stale.status_code == 409
            assert client.get("/v1/memories/no-such-id").status_code == 404
            assert client.get("/no/such/path").status_code == 404
            scraped = httpx.get(f"{base}/metrics", timeout=10)  # no API key, like the probes
    finally:
        server.stop()

    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = parse(scraped.text)
    route = "/v1/memories/{memory_id}"
    assert samples['engram_http_requests_total{method="POST",route="/v1/memories",status="201"}'] == 1
    assert samples['engram_http_requests_total{method="POST",route="/v1/memories",status="200"}'] == 1
    assert samples[f'engram_http_requests_total{{method="PATCH",route="{route}",status="409"}}'] == 1
    assert samples[f'engram_http_requests_total{{method="GET",route="{route}",status="404"}}'] == 1
    assert samples['engram_http_requests_total{method="GET",route="unmatched",status="404"}'] == 1
    assert not any("no-such-id" in name or "/no/such" in name for name in samples)  # no raw paths
    assert samples['engram_remember_total{outcome="created"}'] == 1
    assert samples['engram_remember_total{outcome="exact_duplicate"}'] == 1
    latency = 'engram_http_request_duration_seconds_{}{{method="POST",route="/v1/memories"{}}}'
    assert samples[latency.format("count", "")] == 2
    assert samples[latency.format("bucket", ',le="+Inf"')] == 2
    assert samples[latency.format("sum", "")] > 0
    buckets = [v for k, v in samples.items() if k.startswith(latency.format("bucket", "")[:-1])]
    assert buckets == sorted(buckets)  # cumulative
