"""Deployment artefacts: the Dockerfile, the Kubernetes manifests, the Grafana dashboard and the
Prometheus alert rules — checked offline, against Kubernetes' own schemas where they exist and
against the metrics streamworker really exports everywhere else.

The metric names are never written down here: they are read from a live ``Metrics()`` registry
(with a ``GroupStateCollector`` on a stub reader), suffixes and labels included, so renaming a
metric in ``streamworker/observability/metrics.py`` breaks these tests until the dashboards, alerts
and autoscalers follow.

Needs PyYAML and kubernetes-validate (the ``dev`` extra); without them the tests skip, except under
``CI=true``, where a missing package is a failure.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import json
import os
import re
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from streamworker.cli import build_parser
from streamworker.observability.metrics import GroupState, GroupStateCollector, Metrics
from streamworker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "examples" / "kubernetes"
DASHBOARD = ROOT / "examples" / "grafana" / "streamworker.json"
ALERTS = ROOT / "examples" / "prometheus" / "alerts.yml"
OPERATIONS = ROOT / "docs" / "operations.md"

# Kubernetes versions the core objects must validate against: an older one still widely run, and
# the newest whose schemas the installed kubernetes-validate ships (read at run time).
K8S_FLOOR_VERSION = "1.29"
CORE_KINDS = {"Deployment", "StatefulSet", "Service", "PodDisruptionBudget", "Job"}
CRD_KINDS = {"ServiceMonitor", "ScaledObject", "TriggerAuthentication"}

# Metrics that alert rules may use without streamworker exporting them: Prometheus' own scrape
# health, and kube-state-metrics' pod readiness (the worker does not export its readiness).
EXTERNAL_METRICS = {"up": set(), "kube_pod_status_ready": {"namespace", "pod", "condition"}}
# Labels Prometheus or the Operator attach to every scraped series.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint"}


def _need(module: str) -> ModuleType:
    """Import ``module``; skip without it, but fail under CI, where the dev extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{module} is missing; CI installs it with the dev extra")
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")


# --- what streamworker exports ------------------------------------------------------------------


@functools.cache
def exported_series() -> dict[str, frozenset[str]]:
    """Every sample name a worker's registry can expose, with its label names.

    Each labelled counter and histogram gets one child so that it yields samples (``_total``,
    ``_created``, ``_bucket``, ``_count``, ``_sum``); the gauges come from a collector whose reader
    returns one group with every field set.
    """
    metrics = Metrics()
    for wrapper in vars(metrics).values():
        if isinstance(wrapper, MetricWrapperBase):
            names = wrapper._labelnames
            child = wrapper.labels(*["x"] * len(names)) if names else wrapper
            if hasattr(child, "observe"):
                child.observe(0.01)
            else:
                child.inc()
    state = GroupState(
        stream="orders",
        group="billing",
        dead_letter_stream="{orders}:dlq",
        lag=3,
        pending=2,
        oldest_pending_ms=1,
        consumers=1,
        dead_letters=1,
    )
    metrics.registry.register(GroupStateCollector(lambda: [state]))
    labels: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(names) for name, names in labels.items()}


def family_names() -> set[str]:
    """The metric names as documented: counters with ``_total``, histograms without suffix."""
    names = set()
    for name in exported_series():
        if name.endswith("_created"):
            continue
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix) and name.removesuffix(suffix) + "_bucket" in exported_series():
                name = name.removesuffix(suffix)
        names.add(name)
    return names


# --- PromQL: metric names and label matchers ----------------------------------------------------

_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
    "atan2",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def promql_selectors(expr: str) -> list[tuple[str, set[str]]]:
    """``(metric name, label names matched)`` for every series selector in a PromQL expression.

    A small tokenizer, not a parser: it drops strings, Grafana variables, ranges, grouping
    clauses and function calls, which is all the expressions of this repository need.
    """
    text = re.sub(r"\$\{?\w+\}?", "0", expr)  # Grafana variables ($stream, $__rate_interval)
    matchers: list[str] = []

    def keep_matchers(m: re.Match[str]) -> str:
        matchers.append(m.group(1))
        return f"{{#{len(matchers) - 1}}}"

    # Strings first (they may hold braces), but label matchers need their label names: pull the
    # matcher blocks out before blanking their strings.
    text = re.sub(r"\{((?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*)\}", keep_matchers, text)
    text = _STRING.sub('""', text)
    text = re.sub(r"\[[^\[\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    text = re.sub(r"\boffset\s+-?\w+", " ", text)
    found: list[tuple[str, set[str]]] = []
    for m in _IDENT.finditer(text):
        token, before, after = m.group(), text[: m.start()], text[m.end() :]
        if before[-1:].isdigit() or before[-1:] in (".", "#"):
            continue  # the exponent of a number (1e3) or a matcher placeholder
        if after.lstrip().startswith("("):
            continue  # a function or an aggregation
        if token.lower() in _PROMQL_WORDS:
            continue
        labels: set[str] = set()
        placeholder = re.match(r"\s*\{#(\d+)\}", after)
        if placeholder:
            block = _STRING.sub('""', matchers[int(placeholder.group(1))])
            labels = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", block))
        found.append((token, labels))
    return found


def assert_known_series(expr: str, where: str) -> None:
    """Every selector in ``expr`` names a series streamworker exports (or an allowed external
    one), and matches only labels that series has; ``expr`` selects at least one series."""
    selectors = promql_selectors(expr)
    assert selectors, f"{where}: no metric found in {expr!r}"
    series = exported_series()
    for name, labels in selectors:
        if name in EXTERNAL_METRICS:
            known = EXTERNAL_METRICS[name] | TARGET_LABELS
        else:
            assert name in series, f"{where}: {name!r} is not exported by streamworker ({expr!r})"
            known = series[name] | TARGET_LABELS
        unknown = labels - known
        assert not unknown, f"{where}: {name} has no label {sorted(unknown)} ({expr!r})"


def test_promql_selector_extraction_ignores_functions_groupings_and_variables() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{stream=~"$stream", x="{y}"}'
        "[$__rate_interval]))) / on (g) max(b) * 1e3 and c offset 5m unless vector(0)"
    )
    assert promql_selectors(expr) == [("a_bucket", {"stream", "x"}), ("b", set()), ("c", set())]


def test_exported_series_include_the_suffixes_prometheus_client_adds() -> None:
    series = exported_series()
    assert "streamworker_messages_total" in series
    assert {
        "streamworker_handler_duration_seconds_bucket",
        "streamworker_handler_duration_seconds_count",
        "streamworker_handler_duration_seconds_sum",
    } <= set(series)
    assert "le" in series["streamworker_handler_duration_seconds_bucket"]
    assert series["streamworker_work_left"] == {"stream", "group"}


# --- Dockerfile ---------------------------------------------------------------------------------


def dockerfile_stages() -> list[dict[str, Any]]:
    """The Dockerfile as stages: ``{"from", "name", "instructions": [(KEYWORD, args)]}``, with line
    continuations joined and ``${ARG}`` in FROM resolved to the global ARG's default."""
    lines: list[str] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    global_args: dict[str, str] = {}
    stages: list[dict[str, Any]] = []
    for line in lines:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "ARG" and not stages:
            name, _, default = args.partition("=")
            global_args[name] = default
        elif keyword == "FROM":
            words = args.split()
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), ""), words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append({"from": image, "name": name, "instructions": []})
        else:
            stages[-1]["instructions"].append((keyword, args))
    return stages


def _instructions(stage: dict[str, Any], keyword: str) -> list[str]:
    return [args for kw, args in stage["instructions"] if kw == keyword]


def _stage_args(stage: dict[str, Any]) -> dict[str, str]:
    out = {}
    for args in _instructions(stage, "ARG"):
        name, _, default = args.partition("=")
        out[name] = default
    return out


def test_dockerfile_is_multi_stage_from_slim_python_311() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    assert stages[0]["name"], "the builder stage is named, so the final one can refer to it"
    for stage in stages:
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?(@sha256:[0-9a-f]+)?", stage["from"]), stage
    final = stages[-1]
    assert final["from"] not in {s["name"] for s in stages}, "the final stage starts afresh"


def test_dockerfile_final_stage_runs_as_a_numeric_non_root_user() -> None:
    final = dockerfile_stages()[-1]
    users = _instructions(final, "USER")
    assert users, "no USER in the final stage: it would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), "runAsNonRoot can verify only a numeric UID"
    assert int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    created = " ".join(_instructions(final, "RUN"))
    assert f"--uid {uid}" in created, "the UID is a real user of the image"


def test_dockerfile_final_stage_installs_no_compiler_or_build_tool() -> None:
    final = dockerfile_stages()[-1]
    commands = " ".join(_instructions(final, "RUN") + _instructions(final, "COPY"))
    tools = (
        r"\b(build-essential|gcc|g\+\+|clang|cc|make|cmake|rustc|cargo|python3?-dev|libc6?-dev)\b"
    )
    assert not re.search(tools, commands), f"build tools in the final stage: {commands}"
    assert "apt-get install" not in commands
    assert "apk add" not in commands


def test_dockerfile_builds_a_wheel_and_installs_it_offline_with_the_sql_extra() -> None:
    builder, final = dockerfile_stages()[0], dockerfile_stages()[-1]
    assert any("pip wheel" in run for run in _instructions(builder, "RUN"))
    install = next(run for run in _instructions(final, "RUN") if "pip install" in run)
    assert f"from={builder['name']}" in install or any(
        f"--from={builder['name']}" in c for c in _instructions(final, "COPY")
    ), "the final stage installs the builder's wheels"
    assert "--no-index" in install, "nothing is downloaded (or built) in the final stage"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras = re.search(r"\[project\.optional-dependencies\](.*?)(\n\[|\Z)", pyproject, re.S)
    if extras and re.search(r"^sql\s*=", extras.group(1), re.M):
        for stage in (builder, final):
            assert "sql" in _stage_args(stage).get("EXTRAS", "").split(","), stage["name"]
    assert "[${EXTRAS}]" in install


def test_dockerfile_entrypoint_is_streamworker_with_help_and_sigterm() -> None:
    final = dockerfile_stages()[-1]
    assert json.loads(_instructions(final, "ENTRYPOINT")[-1]) == ["streamworker"]
    assert json.loads(_instructions(final, "CMD")[-1]) == ["--help"]
    assert _instructions(final, "STOPSIGNAL")[-1] == "SIGTERM"
    env = " ".join(_instructions(final, "ENV"))
    assert re.search(r"\bPYTHONUNBUFFERED=1\b", env)


def test_dockerignore_keeps_local_state_out_and_the_sources_in() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        # fnmatch's * also matches "/", so "*/name" stands for Docker's "**/name".
        return any(
            fnmatch.fnmatch(prefix, p) or fnmatch.fnmatch(prefix, "*/" + p.removeprefix("**/"))
            for p in patterns
            for prefix in prefixes
        )

    for local in (".venv", ".git", ".env", "tests", "streamworker/__pycache__"):
        assert ignored(local), f"{local} would be sent to the build"
    builder = dockerfile_stages()[0]
    for copy in _instructions(builder, "COPY"):
        for source in shlex.split(copy)[:-1]:
            if not source.startswith("--"):
                assert not ignored(source.rstrip("/")), f"COPY {source} is excluded"
                assert (ROOT / source).exists(), source


# --- Kubernetes manifests -----------------------------------------------------------------------


@functools.cache
def manifests() -> dict[str, list[dict[str, Any]]]:
    """Every Kubernetes object of examples/kubernetes/ (base, overlays and the rest), by file
    name (names are unique in the tree); the kustomization files themselves are left out."""
    yaml = _need("yaml")
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(K8S.rglob("*.yaml")):
        docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
        docs = [doc for doc in docs if doc.get("kind") != "Kustomization"]
        if docs:
            assert path.name not in found, f"two files named {path.name}"
            found[path.name] = docs
    return found


def objects(kind: str) -> list[dict[str, Any]]:
    return [doc for docs in manifests().values() for doc in docs if doc["kind"] == kind]


def only(kind: str) -> dict[str, Any]:
    found = objects(kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def workloads() -> list[dict[str, Any]]:
    return [only("Deployment"), only("StatefulSet")]


def worker_container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def run_args(workload: dict[str, Any]) -> Any:
    """The worker's arguments as the streamworker CLI itself parses them."""
    return build_parser().parse_args(worker_container(workload)["args"])


def _versions() -> list[str]:
    kv = _need("kubernetes_validate")
    latest = ".".join(kv.utils.latest_version().split(".")[:2])
    return sorted({K8S_FLOOR_VERSION, latest})


def test_every_manifest_is_a_core_object_or_a_checked_custom_resource() -> None:
    kinds = [doc["kind"] for docs in manifests().values() for doc in docs]
    assert set(kinds) == CORE_KINDS | CRD_KINDS, sorted(kinds)


@pytest.mark.parametrize("kind", sorted(CORE_KINDS))
def test_core_objects_validate_against_the_kubernetes_schemas(kind: str) -> None:
    kv = _need("kubernetes_validate")
    for version in _versions():
        for doc in objects(kind):
            try:
                kv.validate(doc, version, strict=True)  # strict: unknown fields are errors
            except kv.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{kind} {doc['metadata']['name']} on {version}: {path}: {exc.message}")


def test_worker_args_are_valid_streamworker_run_flags() -> None:
    for workload in workloads():
        args = run_args(workload)
        assert args.command == "run"
        assert args.target
        assert args.metrics_port == worker_container(workload)["ports"][0]["containerPort"]


def test_worker_serves_metrics_on_all_interfaces() -> None:
    for workload in workloads():
        assert run_args(workload).metrics_host == "0.0.0.0", workload["kind"]


def test_worker_environment_names_real_settings() -> None:
    fields = {f"STREAMWORKER_{name.upper()}" for name in Settings.model_fields}
    for workload in [*workloads(), only("Job")]:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                if env["name"].startswith("STREAMWORKER_"):
                    assert env["name"] in fields, f"{workload['kind']}: {env['name']}"


def test_worker_probes_healthz_for_liveness_and_readyz_for_readiness() -> None:
    for workload in workloads():
        container = worker_container(workload)
        port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = container[probe]["httpGet"]
            assert get["path"] == path, (workload["kind"], probe)
            port = port_names.get(get["port"], get["port"])
            assert port == run_args(workload).metrics_port, (workload["kind"], probe)


def test_grace_period_outlasts_prestop_and_shutdown_timeout() -> None:
    for workload in workloads():
        pod = workload["spec"]["template"]["spec"]
        command = worker_container(workload)["lifecycle"]["preStop"]["exec"]["command"]
        assert command[0] == "sleep"
        pre_stop_s = float(command[1])
        assert pre_stop_s > 0, "a preStop sleep lets the endpoints drain before SIGTERM"
        shutdown_s = run_args(workload).shutdown_timeout_s
        assert shutdown_s is not None, "state the shutdown timeout the grace period is sized for"
        # The preStop hook runs inside the grace period, before SIGTERM.
        assert pod["terminationGracePeriodSeconds"] > pre_stop_s + shutdown_s, workload["kind"]


def test_consumer_name_is_the_pod_name_from_the_downward_api() -> None:
    for workload in workloads():
        container = worker_container(workload)
        env = {e["name"]: e for e in container.get("env", [])}
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert "STREAMWORKER_CONSUMER" not in env, "a fixed name would be shared by every pod"
        assert run_args(workload).consumer is None


def test_worker_pods_have_a_restrictive_security_context() -> None:
    final = dockerfile_stages()[-1]
    image_uid = int(_instructions(final, "USER")[-1].partition(":")[0])
    for workload in [*workloads(), only("Job")]:
        pod = workload["spec"]["template"]["spec"]
        for container in pod["containers"]:
            effective = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
            where = f"{workload['kind']}/{container['name']}"
            assert effective.get("runAsNonRoot") is True, where
            assert effective.get("runAsUser") == image_uid, where
            assert effective.get("readOnlyRootFilesystem") is True, where
            assert effective.get("allowPrivilegeEscalation") is False, where
            assert effective.get("capabilities", {}).get("drop") == ["ALL"], where
            assert effective.get("capabilities", {}).get("add") is None, where
            assert effective.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
            assert effective.get("privileged") is not True, where
        assert pod.get("automountServiceAccountToken") is False, workload["kind"]


def test_service_links_are_off_so_no_variable_lands_in_the_streamworker_namespace() -> None:
    # A Service named streamworker-metrics would otherwise inject STREAMWORKER_METRICS_PORT=tcp://…
    for workload in [*workloads(), only("Job")]:
        assert workload["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_worker_pods_request_resources_and_limit_memory() -> None:
    for workload in [*workloads(), only("Job")]:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), workload["kind"]
            assert "memory" in resources["limits"], workload["kind"]


def test_deployment_and_statefulset_run_the_same_pod_template() -> None:
    deployment, statefulset = workloads()
    assert deployment["spec"]["template"] == statefulset["spec"]["template"]
    assert deployment["spec"]["selector"] == statefulset["spec"]["selector"]


def test_statefulset_is_governed_by_the_headless_service() -> None:
    service = only("Service")
    assert only("StatefulSet")["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"


def test_service_selects_the_worker_pods_and_exposes_the_metrics_port() -> None:
    service = only("Service")
    for workload in workloads():
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics"
    assert port["targetPort"] == "metrics"


def test_service_monitor_scrapes_the_services_metrics_port() -> None:
    monitor, service = only("ServiceMonitor"), only("Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint.get("path", "/metrics") == "/metrics"
    assert set(monitor["spec"]) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    assert set(endpoint) <= {
        "port",
        "path",
        "interval",
        "scrapeTimeout",
        "scheme",
        "relabelings",
        "metricRelabelings",
        "honorLabels",
    }


def test_pdb_limits_disruption_of_the_worker_pods() -> None:
    pdb = only("PodDisruptionBudget")
    for workload in workloads():
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1


def test_migrate_job_runs_streamworker_migrate_with_the_url_from_a_secret() -> None:
    job = only("Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "migrate"
    assert args.db_url is None, "a URL in the arguments would expose its password"
    env = {e["name"]: e for e in container["env"]}
    secret = env["STREAMWORKER_DB_URL"]["valueFrom"]["secretKeyRef"]
    assert secret["name"]
    assert secret["key"]
    assert not secret.get("optional")
    assert container["image"] == worker_container(only("Deployment"))["image"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in {"Never", "OnFailure"}


# --- KEDA ---------------------------------------------------------------------------------------


def scaled_objects() -> dict[str, dict[str, Any]]:
    return {
        name: doc
        for name, docs in manifests().items()
        for doc in docs
        if doc["kind"] == "ScaledObject"
    }


def triggers(scaled: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The triggers of ``kind``; ``"redis-streams"`` includes ``redis-sentinel-streams`` (the
    same scaler, reaching the primary through the Sentinels)."""
    kinds = {kind, "redis-sentinel-streams"} if kind == "redis-streams" else {kind}
    return [t for t in scaled["spec"]["triggers"] if t["type"] in kinds]


def test_scaled_objects_are_well_formed_and_target_the_worker() -> None:
    workload_kinds = {w["kind"]: w["metadata"]["name"] for w in workloads()}
    auth = {a["metadata"]["name"] for a in objects("TriggerAuthentication")}
    assert set(scaled_objects()) == {
        "keda-redis-streams.yaml",
        "keda-prometheus.yaml",
        "keda-redis-sentinel-streams.yaml",
    }
    for name, scaled in scaled_objects().items():
        assert scaled["apiVersion"] == "keda.sh/v1alpha1", name
        target = scaled["spec"]["scaleTargetRef"]
        assert workload_kinds[target.get("kind", "Deployment")] == target["name"], name
        assert 0 <= scaled["spec"]["minReplicaCount"] < scaled["spec"]["maxReplicaCount"], name
        assert scaled["spec"]["triggers"], name
        for trigger in scaled["spec"]["triggers"]:
            assert set(trigger) <= {
                "type",
                "name",
                "metadata",
                "authenticationRef",
                "metricType",
                "useCachedMetrics",
            }, name
            # KEDA's CRD types every metadata value as a string: a bare 500 is rejected.
            assert all(isinstance(v, str) for v in trigger["metadata"].values()), trigger
            if "authenticationRef" in trigger:
                assert trigger["authenticationRef"]["name"] in auth, trigger


def test_scaled_objects_scale_from_zero_on_one_message() -> None:
    for name, scaled in scaled_objects().items():
        assert scaled["spec"]["minReplicaCount"] == 0, name
        lag = [t for t in triggers(scaled, "redis-streams") if "lagCount" in t["metadata"]]
        assert lag, f"{name}: at zero replicas only Redis can tell that a message arrived"
        for trigger in lag:
            assert trigger["metadata"]["activationLagCount"] == "0", name
        for trigger in triggers(scaled, "prometheus"):
            assert trigger["metadata"]["activationThreshold"] == "0", name


def test_scaled_objects_keep_workers_while_entries_are_pending() -> None:
    # Lag alone would scale to zero under entries that wait for a retry or for the reclaimer.
    for name, scaled in scaled_objects().items():
        redis = triggers(scaled, "redis-streams")
        assert any("pendingEntriesCount" in t["metadata"] for t in redis), name
        for trigger in redis:
            assert trigger["metadata"]["consumerGroup"], "without a group KEDA scales on XLEN"


def test_redis_streams_triggers_name_the_workers_stream_and_group() -> None:
    for name, scaled in scaled_objects().items():
        pairs = {
            (t["metadata"]["stream"], t["metadata"]["consumerGroup"])
            for t in triggers(scaled, "redis-streams")
        }
        assert pairs == {("orders", "billing")}, name
        for trigger in triggers(scaled, "prometheus"):
            query = trigger["metadata"]["query"]
            assert 'stream="orders"' in query, name
            assert 'group="billing"' in query, name


def test_prometheus_trigger_scales_on_work_left_of_known_metrics() -> None:
    (trigger,) = triggers(scaled_objects()["keda-prometheus.yaml"], "prometheus")
    query = trigger["metadata"]["query"]
    assert_known_series(query, "keda-prometheus.yaml")
    assert [name for name, _ in promql_selectors(query)] == ["streamworker_work_left"]
    # Every pod reports the group's gauge: a sum would grow with the replica count.
    assert query.startswith("max(")
    assert "sum(" not in query
    assert float(trigger["metadata"]["threshold"]) > 0


def test_trigger_authentication_reads_the_workers_secret() -> None:
    secrets = {
        env["valueFrom"]["secretKeyRef"]["name"]
        for env in worker_container(only("Deployment"))["env"]
        if "secretKeyRef" in env.get("valueFrom", {})
    }
    for auth in objects("TriggerAuthentication"):
        for ref in auth["spec"]["secretTargetRef"]:
            assert ref["name"] in secrets
            assert ref["key"]
            assert ref["parameter"] in {"password", "sentinelPassword"}


# --- Grafana ------------------------------------------------------------------------------------


@functools.cache
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def query_panels() -> list[dict[str, Any]]:
    """Every panel that shows data (rows only group panels and carry no query)."""
    out = []
    for panel in dashboard()["panels"]:
        if panel["type"] == "row":
            out.extend(panel.get("panels", []))
        else:
            out.append(panel)
    return out


def test_dashboard_has_a_datasource_variable_and_stream_and_group_from_label_values() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39
    assert board["uid"]
    assert board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("stream", "group"):
        definition = variables[name]["definition"]
        assert variables[name]["query"] == definition
        assert definition.startswith("label_values(")
        assert definition.endswith(f", {name})")
        assert_known_series(definition.removeprefix("label_values(").rsplit(",", 1)[0], name)


def test_every_dashboard_panel_has_a_query_on_the_datasource_variable() -> None:
    panels = query_panels()
    assert len(panels) >= 14
    ids = [p["id"] for p in dashboard()["panels"]] + [
        p["id"] for row in dashboard()["panels"] for p in row.get("panels", [])
    ]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]


def test_dashboard_queries_use_only_exported_metrics_and_labels() -> None:
    for panel in query_panels():
        for target in panel["targets"]:
            assert_known_series(target["expr"], f"panel {panel['title']!r}")


def test_dashboard_shows_the_metrics_an_operator_needs() -> None:
    used = {
        name
        for panel in query_panels()
        for target in panel["targets"]
        for name, _ in promql_selectors(target["expr"])
    }
    wanted = {
        "streamworker_messages_total",
        "streamworker_handler_duration_seconds_bucket",
        "streamworker_ack_latency_seconds_bucket",
        "streamworker_batch_size_count",
        "streamworker_group_lag",
        "streamworker_pending_messages",
        "streamworker_oldest_pending_age_seconds",
        "streamworker_work_left",
        "streamworker_dead_letter_messages",
        "streamworker_claimed_total",
        "streamworker_dedup_hits_total",
        "streamworker_idempotency_errors_total",
        "streamworker_reconnects_total",
    }
    assert wanted <= used, sorted(wanted - used)
    quantiles = {
        target["expr"].split(",")[0]
        for panel in query_panels()
        for target in panel["targets"]
        if "streamworker_handler_duration_seconds_bucket" in target["expr"]
    }
    assert quantiles == {f"histogram_quantile({q}" for q in ("0.5", "0.95", "0.99")}


def test_dashboard_aggregates_group_gauges_with_max() -> None:
    # Every pod reports the group's gauges; summing them across pods multiplies the value.
    gauges = {
        "streamworker_group_lag",
        "streamworker_pending_messages",
        "streamworker_work_left",
        "streamworker_oldest_pending_age_seconds",
        "streamworker_consumers",
        "streamworker_dead_letter_messages",
    }
    for panel in query_panels():
        for target in panel["targets"]:
            for name, _ in promql_selectors(target["expr"]):
                if name in gauges:
                    inner = re.search(rf"(\w+)(?:\s+by\s*\([^)]*\))?\s*\({name}\b", target["expr"])
                    assert inner, (panel["title"], target["expr"])
                    assert inner.group(1) == "max", (panel["title"], target["expr"])


# --- Prometheus alert rules ---------------------------------------------------------------------


@functools.cache
def alert_rules() -> list[dict[str, Any]]:
    yaml = _need("yaml")
    data = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def test_alert_rules_are_well_formed() -> None:
    yaml = _need("yaml")
    data = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    assert set(data) == {"groups"}
    for group in data["groups"]:
        assert group["name"]
        assert group["rules"]
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names))
    for rule in alert_rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}
        assert re.fullmatch(r"Streamworker[A-Za-z]+", rule["alert"])
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"]
        assert rule["annotations"]["description"]
        assert re.fullmatch(r"(\d+[smhd])+", rule.get("for", "0s")), rule["alert"]
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")")
        assert expr.count("{") == expr.count("}")


def test_alert_expressions_use_only_exported_metrics_and_labels() -> None:
    for rule in alert_rules():
        assert_known_series(rule["expr"], rule["alert"])


def test_alerts_cover_dead_letters_pending_age_work_left_errors_and_readiness() -> None:
    used: dict[str, set[str]] = {}
    for rule in alert_rules():
        for name, _ in promql_selectors(rule["expr"]):
            used.setdefault(name, set()).add(rule["alert"])
    for metric in (
        "streamworker_dead_letter_messages",
        "streamworker_oldest_pending_age_seconds",
        "streamworker_work_left",
        "streamworker_reconnects_total",
        "streamworker_idempotency_errors_total",
        "kube_pod_status_ready",
    ):
        assert metric in used, f"no alert on {metric}"


# --- docs ---------------------------------------------------------------------------------------


def test_operations_doc_explains_every_metric() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    missing = sorted(name for name in family_names() if f"`{name}" not in text)
    assert not missing, f"docs/operations.md does not describe {missing}"


def test_operations_doc_and_kubernetes_readme_name_only_existing_files() -> None:
    for doc in (OPERATIONS, K8S / "README.md"):
        for link in re.findall(r"\]\(([^)#:]+)\)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / link).resolve().exists(), f"{doc.name}: broken link {link}"
