"""A reviewer's view, in a real browser: the corpus merge plan's review table on the asset's page.

Starts ``dagster-webserver`` and ``dagster-daemon`` on 127.0.0.1 against a temporary instance and store, seeds an
agent with three near-duplicate clusters (vectors placed in the merge band), launches ``corpus_merge_plan_job``
for that partition through the GraphQL API (the daemon dequeues and runs it), then opens the asset's partition
page in headless Debian chromium driven by Playwright and checks that the table shows every canonical, every
member and the plan id. A second test rejects one cluster: it opens ``corpus_merge_apply_job``'s launchpad with
the config a reviewer types (plan id, ``reject: [2]``), clicks **Launch Run**, and checks the store: the
rejected cluster's rows stay active, the others are merged. A third follows the plan page's **Apply this plan**
link to the launchpad it prefills and clicks **Launch Run**: the plan is applied with nothing typed. The
screenshots are saved under the test's temporary directory (and copied to ``$ENGRAM_SCREENSHOT_DIR`` when it is set).

Chromium comes from ``apt-get install chromium`` (``.ci/run`` installs it; never ``playwright install``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import numpy as np
import pytest
import yaml
from dagster_procs import DagsterProcs, dagster_env, dagster_processes, make_dagster_home, wait_for

from engram_pipeline.settings import Settings
from engram_pipeline.store import MemoryStore
from tests.constants import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.slow]

AGENT = "reviewer-agent"
# Canonical first (seeded with the highest importance), then its members.
CLUSTERS = [
    [
        "User prefers dark mode in the editor.",
        "The user prefers dark mode in their editor.",
        "User likes dark mode in the editor.",
    ],
    ["The project uses pytest for tests.", "Tests in the project are written with pytest."],
    ["User wants short commit messages.", "User prefers short commit messages."],
]
LAUNCH_RUN = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
RUN_STATUS = "query Status($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"


def require_chromium() -> None:
    """In CI a missing chromium is a failure (``.ci/run`` installs it); elsewhere the test is skipped."""
    if Path(CHROMIUM).exists() or shutil.which("chromium"):
        return
    message = f"{CHROMIUM} not found: install it with `apt-get install -y chromium` (scripts/install_browser.sh)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def seed_clusters(store: MemoryStore, agent: str, *, similarity: float) -> None:
    """Each member at ``similarity`` to its canonical (the members far from each other): one star per group."""
    rng = np.random.default_rng(7)
    dim = store.embedder.dimension
    for group in CLUSTERS:
        base = _unit(rng.standard_normal(dim))
        for i, text in enumerate(group):
            vector = base
            if i:
                noise = rng.standard_normal(dim)
                noise = _unit(noise - noise.dot(base) * base)
                vector = similarity * base + np.sqrt(1 - similarity**2) * noise
            # Inserted as an import would: remember folds a pair the merge judge would merge.
            row = store.engine.new_row(agent, text, tier="ltm", importance=0.9 if i == 0 else 0.5)
            row["vector"] = _unit(vector).tolist()
            assert store.engine.insert_rows([row]) == [row["id"]], text


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def launch_partition_run(procs: DagsterProcs, job: str, partition: str) -> str:
    location = procs.graphql("{ workspaceOrError { ... on Workspace { locationEntries { name } } } }")
    name = location["workspaceOrError"]["locationEntries"][0]["name"]
    params = {
        "selector": {"repositoryLocationName": name, "repositoryName": "__repository__", "jobName": job},
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
    }
    launched = procs.graphql(LAUNCH_RUN, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return str(launched["run"]["runId"])


def run_status(procs: DagsterProcs, run_id: str) -> str:
    return str(procs.graphql(RUN_STATUS, {"id": run_id})["runOrError"]["status"])


def run_ends(procs: DagsterProcs, run_id: str, what: str) -> str:
    """The status run ``run_id`` ends with (SUCCESS, FAILURE or CANCELED), waited for up to 5 minutes."""
    ended = ("SUCCESS", "FAILURE", "CANCELED")
    return str(wait_for(lambda: (s := run_status(procs, run_id)) in ended and s, timeout=300, what=what, procs=procs))


def test_merge_plan_review_table_in_the_browser(tmp_path: Path) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    uri = str(tmp_path / "store" / "lancedb")
    # The band rule judges the planted stars (hand-made vectors in the band); the calibrated hashing judge
    # would rightly keep some of these rewordings apart.
    judge = {"ENGRAM_JUDGE": "rules"}
    store = MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **judge}))
    band = (store.settings.merge_threshold, store.settings.duplicate_threshold)
    seed_clusters(store, AGENT, similarity=round(sum(band) / 2, 3))
    home = make_dagster_home(tmp_path / "dagster")
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("agents", [AGENT])

    with dagster_processes(dagster_env(home, store_uri=uri, extra=judge)) as procs:
        run_id = launch_partition_run(procs, "corpus_merge_plan_job", AGENT)
        status = run_ends(procs, run_id, f"run {run_id} of corpus_merge_plan_job")
        assert status == "SUCCESS", f"run {run_id} ended {status}:\n{procs.log_tail('daemon')}"
        plan = store.engine.latest_plan(AGENT)
        assert plan is not None and plan["status"] == "pending"
        assert len(plan["body"]["clusters"]) == len(CLUSTERS)

        shot = tmp_path / "corpus_merge_plan_review.png"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1800, "height": 1300})
                page.goto(f"{procs.url}/assets/corpus_merge_plan?view=partitions&partition={AGENT}")
                table = page.locator("table", has_text="canonical").filter(has_text="plan_id").last
                table.wait_for(timeout=120_000)
                _dismiss_community_dialog(page)
                table.scroll_into_view_if_needed()
                page.screenshot(path=str(shot), full_page=True)
                table.screenshot(path=str(tmp_path / "review_table.png"))
                cells = table.inner_text()
                body = page.inner_text("body")
            finally:
                browser.close()

    print(f"screenshots: {shot} and {tmp_path / 'review_table.png'}")
    assert shot.stat().st_size > 10_000
    assert plan["plan_id"] in body, "the page shows the plan id a reviewer applies"
    for group in CLUSTERS:
        for text in group:
            assert text in cells, f"{text!r} missing from the review table"
    rows = [line.split("\t") for line in cells.splitlines() if "\t" in line]
    roles = [cell.strip() for row in rows for cell in row if cell.strip() in ("canonical", "member")]
    assert roles.count("canonical") == len(CLUSTERS)
    assert roles.count("member") == sum(len(g) - 1 for g in CLUSTERS)


def _dismiss_community_dialog(page: object) -> None:
    """The UI greets a new instance with a newsletter dialog over the page; a reviewer would skip it."""
    skip = page.get_by_role("button", name="Skip")  # type: ignore[attr-defined]
    try:
        skip.click(timeout=5_000)
    except Exception:  # noqa: BLE001 - the dialog does not always appear
        return


def _keep(shot: Path) -> None:
    """Copy a screenshot to ``$ENGRAM_SCREENSHOT_DIR`` (for the docs), when that is set."""
    if target := os.environ.get("ENGRAM_SCREENSHOT_DIR"):
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(target) / shot.name)


def _review_table(page: object, url: str, *, has_text: str) -> object:
    page.goto(url)  # type: ignore[attr-defined]
    table = page.locator("table", has_text=has_text).filter(has_text="plan_id").last  # type: ignore[attr-defined]
    table.wait_for(timeout=120_000)
    _dismiss_community_dialog(page)
    table.scroll_into_view_if_needed()
    return table


@contextmanager
def _a_pending_plan(tmp_path: Path) -> Iterator[tuple[MemoryStore, DagsterProcs, dict[str, Any]]]:
    """The clusters of :data:`CLUSTERS` in a store (rules judge, hashing), a Dagster instance's processes on it,
    and the plan its ``corpus_merge_plan_job`` run stored, pending review."""
    uri = str(tmp_path / "store" / "lancedb")
    judge = {"ENGRAM_JUDGE": "rules"}
    store = MemoryStore.open(uri, settings=Settings.from_env({"ENGRAM_EMBEDDER": "hashing", **judge}))
    band = (store.settings.merge_threshold, store.settings.duplicate_threshold)
    seed_clusters(store, AGENT, similarity=round(sum(band) / 2, 3))
    home = make_dagster_home(tmp_path / "dagster")
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("agents", [AGENT])

    with dagster_processes(dagster_env(home, store_uri=uri, extra=judge)) as procs:
        planned = launch_partition_run(procs, "corpus_merge_plan_job", AGENT)
        status = run_ends(procs, planned, "the plan")
        assert status == "SUCCESS", procs.log_tail("daemon")
        plan = store.engine.latest_plan(AGENT, status="pending")
        assert plan is not None and len(plan["body"]["clusters"]) == len(CLUSTERS)
        yield store, procs, plan


def test_apply_with_a_rejected_cluster_from_the_launchpad(tmp_path: Path) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with _a_pending_plan(tmp_path) as (store, procs, plan):
        pid, clusters = plan["plan_id"], plan["body"]["clusters"]
        rejected = clusters[1]  # cluster number 2
        location = procs.graphql("{ workspaceOrError { ... on Workspace { locationEntries { name } } } }")
        name = location["workspaceOrError"]["locationEntries"][0]["name"]
        config = f"ops:\n  corpus_merge_apply:\n    config:\n      plan_id: {pid}\n      reject: [2]\n"
        query = urlencode({"config": config, "tags[0][key]": "dagster/partition", "tags[0][value]": AGENT})
        launchpad = f"{procs.url}/locations/__repository__@{name}/jobs/corpus_merge_apply_job/playground/setup?{query}"

        plan_shot, apply_shot = tmp_path / "review-plan.png", tmp_path / "review-veto.png"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 1200})
                plan_page = f"{procs.url}/assets/corpus_merge_plan?view=partitions&partition={AGENT}"
                table = _review_table(page, plan_page, has_text="canonical")
                table.screenshot(path=str(plan_shot))
                _keep(plan_shot)
                # the table fits the page, and content is its widest column (250 px of 676 here; 98 px when
                # memory ids, reasons and the empty outcome had columns of their own)
                box = table.bounding_box()
                widths = {h.inner_text().strip(): h.bounding_box()["width"] for h in table.locator("th").all()}
                print(f"review table at x={box['x']:.0f}, {box['width']:.0f} px wide; columns {widths}")
                assert box["x"] + box["width"] <= 1600 and max(widths, key=widths.__getitem__) == "content", widths

                page.goto(launchpad)
                launch = page.get_by_role("button", name="Launch Run")
                launch.wait_for(timeout=120_000)
                _dismiss_community_dialog(page)
                launch.click()
                page.wait_for_url("**/runs/**", timeout=120_000)
                applied = page.url.split("/runs/")[1].split("?")[0].strip("/")
                status = run_ends(procs, applied, "the apply")
                assert status == "SUCCESS", procs.log_tail("daemon")
                apply_page = f"{procs.url}/assets/corpus_merge_apply?view=partitions&partition={AGENT}"
                table = _review_table(page, apply_page, has_text="rejected")
                table.screenshot(path=str(apply_shot))
                cells = table.inner_text()
            finally:
                browser.close()

    for shot in (plan_shot, apply_shot):
        _keep(shot)
    print(f"screenshots: {plan_shot} and {apply_shot}")
    rows = {r["id"]: r for r in store.list_memories(AGENT)}
    kept = [rejected["canonical"], *rejected["members"]]
    assert all(rows[r["id"]]["status"] == "active" and rows[r["id"]]["version"] == r["version"] for r in kept)
    for number, cluster in enumerate(clusters, start=1):
        if number != 2:
            assert all(rows[m["id"]]["superseded_by"] == cluster["canonical"]["id"] for m in cluster["members"])
    assert store.engine.get_plan(pid)["status"] == "applied"  # type: ignore[index]
    assert sorted(
        e["memory_id"] for e in store.engine.audit_for_agent(AGENT, actions=["reject_merge"]).to_pylist()
    ) == sorted(r["id"] for r in kept)
    table_rows = [[c.strip() for c in line.split("\t")] for line in cells.splitlines() if "\t" in line]
    shown = [(row[0], row[-2]) for row in table_rows if row[0].isdigit()]  # (cluster, outcome)
    assert [o for n, o in shown if n == "2"] == ["rejected"] * len(kept)
    assert {o for n, o in shown if n != "2"} == {"canonical", "merged"}
    assert all(row[-1] == pid for row in table_rows if row[0].isdigit())  # the plan id column


def test_apply_a_plan_from_its_page_without_typing_its_id(tmp_path: Path) -> None:
    """The plan's page links to the apply job's launchpad prefilled with the plan id and partition: a reviewer
    clicks **Apply this plan**, then **Launch Run**, and the plan is applied (nothing typed)."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with _a_pending_plan(tmp_path) as (store, procs, plan):
        shot = tmp_path / "act-on-plan.png"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 1200})
                page.goto(f"{procs.url}/assets/corpus_merge_plan?view=partitions&partition={AGENT}")
                link = page.get_by_role("link", name="Apply this plan")
                link.wait_for(timeout=120_000)
                _dismiss_community_dialog(page)
                assert "was stored pending" in page.inner_text("body")
                discard = parse_qs(
                    urlsplit(page.get_by_role("link", name="discard it").get_attribute("href") or "").query
                )
                page.screenshot(path=str(shot))
                if link.get_attribute("target") == "_blank":  # the UI opens metadata links in a new tab
                    with page.context.expect_page() as opened:
                        link.click()
                    page = opened.value
                else:
                    link.click()
                launch = page.get_by_role("button", name="Launch Run")
                launch.wait_for(timeout=120_000)
                _dismiss_community_dialog(page)
                launch.click()
                page.wait_for_url("**/runs/**", timeout=120_000)
                applied = page.url.split("/runs/")[1].split("?")[0].strip("/")
            finally:
                browser.close()
        status = run_ends(procs, applied, "the apply")
        assert status == "SUCCESS", procs.log_tail("daemon")

    _keep(shot)
    assert discard["tags[0][value]"] == [AGENT]
    assert yaml.safe_load(discard["config"][0]) == {
        "ops": {"corpus_merge_apply": {"config": {"plan_id": plan["plan_id"], "discard": True}}}
    }
    assert store.engine.get_plan(plan["plan_id"])["status"] == "applied"  # type: ignore[index]
    rows = {r["id"]: r for r in store.list_memories(AGENT)}
    for cluster in plan["body"]["clusters"]:
        assert all(rows[m["id"]]["superseded_by"] == cluster["canonical"]["id"] for m in cluster["members"])
