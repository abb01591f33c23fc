"""The production units (``deploy/``): each component handed to the platform's supervisor.
systemd's own verifier reads every unit (with this environment's paths), each restarts on
failure and ends its whole control group; the Kubernetes manifests validate against the API's
schema, probe ``/healthz`` and ``/readyz``, mount their secrets 0400 and admit only launchers;
every command they run parses with this code's flags."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
VENV = "/opt/leap/.venv"


def _unit(path: Path) -> dict[str, str]:
    """The unit's ``key=value`` settings (continued lines joined), the last of a key kept."""
    text = path.read_text().replace("\\\n", " ")
    found = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip()
    return found


def test_every_component_has_a_unit():
    names = {p.stem for p in UNITS}
    assert names == {"leap-mlflow", "leap-dagster-webserver", "leap-dagster-daemon", "leap-serve"}


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.stem)
def test_a_unit_restarts_on_failure_and_ends_its_whole_group(path):
    unit = _unit(path)
    assert unit["Restart"] == "on-failure" and unit["KillMode"] == "control-group"
    assert unit["UMask"] == "0077" and unit["User"] == "leap" and unit["NoNewPrivileges"] == "yes"
    argv = shlex.split(unit["ExecStart"])
    assert argv[0].startswith(f"{VENV}/bin/")
    if path.stem == "leap-dagster-webserver":
        assert "--read-only" in argv and argv[argv.index("-h") + 1] == "127.0.0.1"
    if path.stem == "leap-serve":  # its flags are this code's
        from leap_pipeline.app.cli import build_parser

        args = build_parser().parse_args(argv[1:])
        assert args.token_file and args.tls_cert and args.tls_key


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.stem)
def test_systemd_verifies_each_unit(path, tmp_path):
    """``systemd-analyze verify`` with the venv path pointed at this environment's (it checks
    that every command exists); required in CI, where the machine has it."""
    if shutil.which("systemd-analyze") is None:
        if os.environ.get("LEAP_CI"):
            pytest.fail("systemd-analyze is not on this CI machine")
        pytest.skip("systemd-analyze is not on this machine")
    text = path.read_text().replace(VENV, sys.prefix)
    (tmp_path / path.name).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / path.name)], capture_output=True, text=True
    )
    problems = [line for line in done.stderr.splitlines() if path.name in line]
    assert done.returncode == 0 and not problems, done.stderr


def _manifests() -> list[dict]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / "kubernetes" / "leap-serve.yaml").open())]


def test_the_kubernetes_manifests_validate_and_probe_the_service():
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    version = kubernetes_validate.utils.latest_version()
    docs = _manifests()
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == ["Deployment", "NetworkPolicy", "Service", "Service"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert all(v["secret"]["defaultMode"] == 0o400 for v in pod["volumes"] if "secret" in v)
    assert pod["securityContext"]["runAsNonRoot"] is True
    from leap_pipeline.app.cli import build_parser

    args = build_parser().parse_args(container["command"][1:] + container["args"])
    assert args.webhook_port == 8443 and args.token_file.startswith("/etc/leap/tokens/")
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    ports = [rule["ports"][0]["port"] for rule in policy["spec"]["ingress"]]
    assert ports == [8765, 8443] and policy["spec"]["ingress"][0]["from"]  # launchers only
