"""The container image and the Kubernetes manifests (``Dockerfile``, ``deploy/k8s/``), checked without a cluster
or a container builder (neither runs here): every manifest parses and has the fields Kubernetes requires, every
role runs the one image with a command this project installs, reads the shared environment, and has readiness
and liveness probes; services reach a container port; the environment covers ``deploy/env.example``."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BIN = Path(sys.executable).parent
IMAGE = "engram-pipeline:0.1.0"
ROLES = {"engram-code-location", "engram-daemon", "engram-webserver", "engram-worker", "engram-api"}


def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), f"{path.name}: a document that is not a mapping"
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), f"{path.name}: {doc.keys()}"
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"]), doc["metadata"]
            docs.append(doc)
    return docs


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in manifests() if d["kind"] == kind}


def test_every_role_runs_the_image_with_probes_and_the_shared_environment() -> None:
    deployments = by_kind("Deployment")
    assert set(deployments) == ROLES
    config, secret = by_kind("ConfigMap"), by_kind("Secret")
    for name, deployment in deployments.items():
        assert deployment["apiVersion"] == "apps/v1"
        spec = deployment["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items(), name
        (container,) = spec["template"]["spec"]["containers"]
        assert container["image"] == IMAGE, name
        command = container["command"]
        assert all(isinstance(word, str) for word in command), (name, command)  # ports quoted, not ints
        program = command[0]
        assert program == "python" or (BIN / program).exists() or shutil.which(program), (name, program)
        for flag, value in zip(command, command[1:], strict=False):
            if flag == "-m":
                assert importlib.util.find_spec(value) is not None, (name, value)
            if flag in ("-w", "-y"):
                assert (ROOT / value).is_file(), (name, value)
        for probe in ("readinessProbe", "livenessProbe"):
            assert probe in container, (name, probe)
            check = container[probe]
            assert {"exec", "httpGet"} & check.keys(), (name, probe)
            if "httpGet" in check:
                assert check["httpGet"]["port"] in {p["name"] for p in container["ports"]}, (name, probe)
        refs = container["envFrom"]
        assert {r["configMapRef"]["name"] for r in refs if "configMapRef" in r} <= config.keys(), name
        assert {r["secretRef"]["name"] for r in refs if "secretRef" in r} <= secret.keys(), name
        assert container["resources"]["requests"], name
    assert deployments["engram-daemon"]["spec"]["replicas"] == 1
    assert deployments["engram-daemon"]["spec"]["strategy"]["type"] == "Recreate"  # never two daemons


def test_services_reach_a_container_port() -> None:
    deployments = by_kind("Deployment")
    for name, service in by_kind("Service").items():
        selector = service["spec"]["selector"]
        targets = [
            d for d in deployments.values() if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(targets) == 1, (name, selector)
        ports = {p["name"] for p in targets[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert all(p["targetPort"] in ports for p in service["spec"]["ports"]), name
    grpc = yaml.safe_load((ROOT / "deploy" / "workspace-grpc.yaml").read_text())["load_from"][0]["grpc_server"]
    assert grpc["host"] in by_kind("Service") and grpc["host"] == "engram-code-location"


def test_the_environment_covers_env_example() -> None:
    example = {
        line.split("=", 1)[0]
        for line in (ROOT / "deploy" / "env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    (config,) = by_kind("ConfigMap").values()
    (secret,) = by_kind("Secret").values()
    given = set(config["data"]) | set(secret["stringData"])
    dockerfile = (ROOT / "Dockerfile").read_text()
    in_image = {name for name in example if re.search(rf"\b{name}=", dockerfile)}
    assert example - in_image <= given, sorted(example - in_image - given)
    assert all(isinstance(v, str) for v in config["data"].values())  # a ConfigMap holds strings only


def test_the_image_installs_what_the_roles_run() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    extras = set(re.search(r'"\.\[([a-z,]+)\]"', dockerfile).group(1).split(","))  # type: ignore[union-attr]
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert extras <= declared and {"dagster", "api", "minilm", "deploy"} <= extras
    assert "cp deploy/dagster.yaml" in dockerfile and "PYTHONPATH=/app" in dockerfile  # the launcher's module
    assert "COPY deploy" in dockerfile


def test_a_stopping_worker_signals_celery_itself() -> None:
    """The worker's main process (the dagster-celery CLI) does not pass SIGTERM to its `celery` child: the
    preStop hook signals the pidfile celery writes, and waits."""
    (container,) = by_kind("Deployment")["engram-worker"]["spec"]["template"]["spec"]["containers"]
    (pidfile,) = [w.split("=", 1)[1] for w in container["command"] if w.startswith("--pidfile=")]
    hook = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert f"cat {pidfile}" in hook and "kill -TERM" in hook and "kill -0" in hook, hook
    assert container["command"].index(f"--pidfile={pidfile}") > container["command"].index("--")  # celery's flag
