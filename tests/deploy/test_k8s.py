"""The Kubernetes manifests: they build with kustomize, validate strictly offline, and keep the
promises that let the service scale out and roll without dropping requests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import PROJECT_ROOT

BIN = Path(sys.executable).parent
OVERLAYS = PROJECT_ROOT / "deploy" / "k8s" / "overlays"


def build(overlay: str) -> tuple[str, dict[str, dict[str, Any]]]:
    result = subprocess.run(
        [str(BIN / "kubectl"), "kustomize", str(OVERLAYS / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(result.stdout) if d}
    return result.stdout, docs


@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_overlay_builds_and_validates_strictly(overlay: str, tmp_path: Path) -> None:
    text, docs = build(overlay)
    assert set(docs) == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"}
    path = tmp_path / f"{overlay}.yaml"
    path.write_text(text)
    result = subprocess.run(
        [str(BIN / "kubernetes-validate"), "--strict", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def drain_timeout() -> int:
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", (PROJECT_ROOT / "Dockerfile").read_text(), re.M).group(1))
    return int(cmd[cmd.index("--graceful-timeout") + 1])


def test_deployment_policies() -> None:
    _, docs = build("cpu")
    deployment = docs["Deployment"]
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    [c] = pod["containers"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert c["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and {"cpu", "memory"} <= set(c["resources"]["limits"])
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["allowPrivilegeEscalation"] is False
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    settle = float(docs["ConfigMap"]["data"]["MT_DRAIN_SETTLE_S"])
    assert pod["terminationGracePeriodSeconds"] > int(pre_stop[1]) + settle + drain_timeout()
    assert c["envFrom"][0]["configMapRef"]["name"] == docs["ConfigMap"]["metadata"]["name"]


def test_service_hpa_and_pdb_point_at_the_pods() -> None:
    _, docs = build("cpu")
    pod_labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"].items() <= pod_labels.items()
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    hpa = docs["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == docs["Deployment"]["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] >= 2
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == "http"


def test_gpu_overlay_asks_for_a_gpu_and_cuda() -> None:
    _, docs = build("gpu")
    [c] = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["image"].endswith(":cuda")
    assert docs["ConfigMap"]["data"]["MT_PROVIDER"] == "cuda"
    _, cpu = build("cpu")
    assert cpu["ConfigMap"]["data"]["MT_PROVIDER"] == "cpu"


@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_every_configmap_setting_is_one_the_service_reads(overlay: str) -> None:
    """A misspelt MT_ name would be ignored silently by the service; here it fails instead."""
    from service.settings import Settings

    _, docs = build(overlay)
    data = docs["ConfigMap"]["data"]
    names = {key.removeprefix("MT_").lower() for key in data if key.startswith("MT_")}
    assert names <= set(Settings.model_fields), names - set(Settings.model_fields)
    Settings(**{name: data[f"MT_{name.upper()}"] for name in names})  # each value parses
