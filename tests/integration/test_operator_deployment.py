"""Dockerfile and docker-compose.yml (SPEC 11.4). There is no Docker engine here: the
compose file is validated by `docker-compose config` (Debian package docker-compose,
installed by ./dev test), the Dockerfile by what it must contain."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(ROOT / "docker-compose.yml", tmp_path / "docker-compose.yml")
    (tmp_path / "config.yaml").write_text("task_source: github\n")
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.fail("docker-compose is not installed (./dev test installs the Debian package)")
    return subprocess.run([compose, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)


def test_compose_file_is_valid_and_serves_by_default(tmp_path: Path) -> None:
    result = _compose(tmp_path, "config")
    assert result.returncode == 0, result.stderr
    rendered = yaml.safe_load(result.stdout)
    default = {name for name, service in rendered["services"].items() if not service.get("profiles")}
    assert default == {"agent"}
    assert rendered["services"]["agent"]["command"] == ["coding-agent", "serve"]


def test_distributed_profile_adds_rabbitmq_postgres_and_workers(tmp_path: Path) -> None:
    result = _compose(tmp_path, "--profile", "distributed", "config")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    distributed = {name for name, service in services.items() if "distributed" in service.get("profiles", [])}
    assert distributed == {"worker", "rabbitmq", "postgres"}
    assert services["worker"]["command"] == ["coding-agent", "worker"]
    assert services["worker"]["deploy"]["replicas"] >= 2


def test_dockerfile_is_slim_sandboxed_non_root_and_health_checked() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines[0].startswith("FROM python:3.1") and lines[0].endswith("-slim")
    assert "git" in text and "bubblewrap" in text
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert any(line.startswith("HEALTHCHECK") for line in lines) and "/healthz" in text
    assert lines[-1] == 'CMD ["coding-agent", "serve"]'
