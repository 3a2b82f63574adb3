"""What opening the store costs to import: LanceDB's REST namespace models stay unbuilt (deferred by
``engram_pipeline.store.lancedb_import``) and scipy is not imported until a pass clusters or compares texts.

Each check runs in a fresh interpreter: the test process has imported all of it already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CODE = """
import json, sys
from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
store = MemoryStore.open(sys.argv[1], settings=Settings(embedder="hashing"))
store.recall("alice", "where does the user live")
from lance_namespace_urllib3_client.models import CreateTableRequest
import pydantic
class Later(pydantic.BaseModel):  # defer_build is lancedb's import's alone, not every model's after it
    n: int
print(json.dumps({
    "namespace model built": CreateTableRequest.__pydantic_complete__,
    "later model built": Later.__pydantic_complete__,
    "scipy": sorted(m for m in sys.modules if m.split(".")[0] == "scipy")[:3],
}))
"""


def test_opening_and_recalling_leaves_lancedbs_namespace_models_unbuilt_and_scipy_unimported(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path / "store")], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "namespace model built": False,
        "later model built": True,
        "scipy": [],
    }
