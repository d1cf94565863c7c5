"""The Kubernetes overlays rendered with ``kubectl kustomize`` (offline) and the alert rules
checked with ``promtool``: the tools an operator runs, on the files as shipped.

kubectl (1.21+, for kustomize v4+) and promtool (Debian's ``prometheus`` package) come from
``scripts/install-services.sh``. Without them the tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "examples" / "kubernetes"
PROMETHEUS = ROOT / "examples" / "prometheus"
OVERLAYS = (
    "deployment",
    "statefulset",
    "keda-redis-streams",
    "keda-prometheus",
    "keda-redis-sentinel-streams",
)
CORE_KINDS = {"Deployment", "StatefulSet", "Service", "PodDisruptionBudget"}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{name} is missing; scripts/install-services.sh installs it")
        pytest.skip(f"{name} is not installed (scripts/install-services.sh)")
    return path


def render(overlay: str) -> list[dict[str, Any]]:
    """``kubectl kustomize overlays/OVERLAY``: the objects ``kubectl apply -k`` would send."""
    yaml = pytest.importorskip("yaml")
    result = subprocess.run(
        [_tool("kubectl"), "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # no deprecation warnings for users to read
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_two_objects_of_an_overlay_share_a_kind_and_name(overlay: str) -> None:
    keys = [
        (o["apiVersion"].split("/")[0], o["kind"], o["metadata"]["name"]) for o in render(overlay)
    ]
    assert len(keys) == len(set(keys)), keys


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_runs_exactly_one_workload(overlay: str) -> None:
    workloads = [o for o in render(overlay) if o["kind"] in {"Deployment", "StatefulSet"}]
    assert len(workloads) == 1, _kinds(render(overlay))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_core_objects_validate_against_the_kubernetes_schemas(overlay: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    version = ".".join(kv.utils.latest_version().split(".")[:2])
    for obj in render(overlay):
        if obj["kind"] in CORE_KINDS:
            kv.validate(obj, version, strict=True)


def test_the_plain_overlays_hold_the_base_and_their_workload() -> None:
    assert _kinds(render("deployment")) == [
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ServiceMonitor",
    ]
    assert _kinds(render("statefulset")) == [
        "PodDisruptionBudget",
        "Service",
        "ServiceMonitor",
        "StatefulSet",
    ]


@pytest.mark.parametrize(
    "overlay", ["keda-redis-streams", "keda-prometheus", "keda-redis-sentinel-streams"]
)
def test_keda_overlays_leave_the_replica_count_to_keda(overlay: str) -> None:
    objects = render(overlay)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert "replicas" not in deployment["spec"]
    (scaled,) = [o for o in objects if o["kind"] == "ScaledObject"]
    target = scaled["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    auth = {o["metadata"]["name"] for o in objects if o["kind"] == "TriggerAuthentication"}
    refs = {
        t["authenticationRef"]["name"]
        for t in scaled["spec"]["triggers"]
        if "authenticationRef" in t
    }
    assert refs, "the redis-streams triggers need the Redis password"
    assert refs <= auth


def test_the_sentinel_overlay_gives_workers_and_keda_the_sentinels_password() -> None:
    objects = render("keda-redis-sentinel-streams")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = env["STREAMWORKER_SENTINEL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"], ref["optional"]) == (
        "billing-worker",
        "sentinel-password",
        True,
    )
    (auth,) = [o for o in objects if o["kind"] == "TriggerAuthentication"]
    assert {p["parameter"] for p in auth["spec"]["secretTargetRef"]} == {
        "password",
        "sentinelPassword",
    }
    (scaled,) = [o for o in objects if o["kind"] == "ScaledObject"]
    triggers = scaled["spec"]["triggers"]
    assert {t["type"] for t in triggers} == {"redis-sentinel-streams"}
    assert all(t["metadata"]["sentinelMaster"] == "mymaster" for t in triggers)


def test_alert_rules_pass_promtool_check() -> None:
    result = subprocess.run(
        [_tool("promtool"), "check", "rules", "alerts.yml"],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    # alerts.test.yml: one long outage (many attempts, one reconnect) does not fire
    # StreamworkerReconnecting; five outages in 15 minutes do.
    result = subprocess.run(
        [_tool("promtool"), "test", "rules", "alerts.test.yml"],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
