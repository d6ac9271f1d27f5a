"""The setup cache's key and copies on real directories (SPEC 7.1, 15).

A workspace here is a plain directory a pull request could have shaped: symlinks to a
directory beside it (the host's files), hard links, files at any depth.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coding_agent.tools.paths import ConfinedRoot, PathOutsideWorkspace
from coding_agent.workspace.confined_copy import copy_between, remove_under
from coding_agent.workspace.setup_cache import CacheScope, CachedSetup, SetupCache, key_paths

SCOPE = CacheScope("github https://api.github.com 41", trusted=True)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """The host's files beside the workspace, which no copy may change."""
    directory = tmp_path / "host"
    (directory / "cachedir").mkdir(parents=True)
    (directory / "config.yaml").write_text("host: configuration\n")
    (directory / "cachedir" / "keep.txt").write_text("kept\n")
    return directory


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_key_paths_are_lockfiles_at_any_depth_and_what_the_script_names() -> None:
    files = [
        "README.md", "requirements.txt", "services/api/deep/package-lock.json", "tools/build.sh",
        "tools/other.sh", "deps/a.txt", "deps/b/c.txt", "src/app.py", "reqs/dev.txt",
    ]  # fmt: skip
    script = "set -e\n. venv/bin/activate\nsh ./tools/build.sh && cp -r deps .deps\npip install --requirement=reqs/dev.txt\n"
    assert key_paths(script, files) == [
        "deps/a.txt", "deps/b/c.txt", "reqs/dev.txt", "requirements.txt", "services/api/deep/package-lock.json",
        "tools/build.sh",
    ]  # fmt: skip
    assert key_paths("python3 -m pip install .\n", files) == sorted(files), "`.` as an argument is the whole tree"
    assert key_paths("echo 'unbalanced\nsh tools/other.sh\n", files)[-1] == "tools/other.sh"


def test_key_names_the_repository_and_the_content_of_what_the_script_reads(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "tools").mkdir(parents=True)
    (workspace / "tools" / "build.sh").write_text("cp a b\n")
    (workspace / "requirements.txt").write_text("tinypkg==1.0\n")
    files, script, cache = ["requirements.txt", "tools/build.sh"], "sh tools/build.sh\n", SetupCache(tmp_path / "cache")
    first = cache.key(SCOPE, script, workspace, files)
    assert cache.key(SCOPE, script, workspace, files) == first
    assert cache.key(CacheScope("github https://api.github.com 42", True), script, workspace, files) != first
    assert cache.key(CacheScope("github https://ghe.example 41", True), script, workspace, files) != first
    (workspace / "tools" / "build.sh").write_text("cp a c\n")
    assert cache.key(SCOPE, script, workspace, files) != first


def test_key_never_reads_through_a_symlink(tmp_path: Path, host: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "reqs").symlink_to(host)
    (host / "requirements.txt").write_text("one\n")
    cache, files = SetupCache(tmp_path / "cache"), ["reqs/requirements.txt"]
    before = cache.key(SCOPE, "true\n", workspace, files)
    (host / "requirements.txt").write_text("two\n")
    assert cache.key(SCOPE, "true\n", workspace, files) == before, "the host's file was read"


def _entry(tmp_path: Path, paths: dict[str, str]) -> tuple[SetupCache, CachedSetup]:
    """A stored entry holding `paths` (relative path -> content), filled from a clean workspace."""
    source = tmp_path / "filled"
    for relative, content in paths.items():
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_text(content)
    cache = SetupCache(tmp_path / "cache")
    assert cache.store("k" * 64, source, sorted({p.split("/")[0] + "/" + p.split("/")[1] for p in paths}), 0, "ok")
    entry = cache.lookup("k" * 64)
    assert entry is not None
    return cache, entry


def test_restore_through_a_symlinked_directory_is_refused_and_undone(tmp_path: Path, host: Path) -> None:
    cache, entry = _entry(tmp_path, {"a/x/config.yaml": "from-setup\n", "b/cachedir/lib.txt": "built\n"})
    workspace = tmp_path / "ws"
    (workspace / "a").mkdir(parents=True)
    (workspace / "b").symlink_to(host)
    before = _snapshot(host)
    assert not cache.restore(entry, workspace)
    assert _snapshot(host) == before
    assert not (workspace / "a" / "x").exists(), "the part restored before the refusal is removed again"


def test_restore_replaces_a_final_symlink_or_hard_link_without_touching_its_target(tmp_path: Path, host: Path) -> None:
    cache, entry = _entry(tmp_path, {"a/config.yaml": "from-setup\n", "b/cachedir/lib.txt": "built\n"})
    workspace = tmp_path / "ws"
    (workspace / "a").mkdir(parents=True)
    (workspace / "b").mkdir()
    os.link(host / "config.yaml", workspace / "a" / "config.yaml")
    (workspace / "b" / "cachedir").symlink_to(host / "cachedir")
    before = _snapshot(host)
    assert cache.restore(entry, workspace)
    assert _snapshot(host) == before, "written through a hard link or removed through a symlink"
    assert (workspace / "a" / "config.yaml").read_text() == "from-setup\n"
    assert not (workspace / "b" / "cachedir").is_symlink() and (workspace / "b/cachedir/lib.txt").read_text() == "built\n"


def test_store_keeps_symlinks_as_links_and_refuses_paths_through_them(tmp_path: Path, host: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".venv" / "bin").mkdir(parents=True)
    (workspace / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (workspace / "b").symlink_to(host)
    cache = SetupCache(tmp_path / "cache")
    assert cache.store("v" * 64, workspace, [".venv"], 0, "")
    stored = tmp_path / "cache" / "vv" / ("v" * 64) / "files" / ".venv" / "bin" / "python"
    assert stored.is_symlink() and os.readlink(stored) == "/usr/bin/python3"
    assert not cache.store("w" * 64, workspace, ["b/cachedir"], 0, ""), "a path through a symlink is not copied"
    assert cache.lookup("w" * 64) is None


def test_remove_under_removes_a_link_not_what_it_points_to(tmp_path: Path, host: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "cachedir").symlink_to(host / "cachedir")
    (workspace / "b").symlink_to(host)
    root = ConfinedRoot(workspace)
    before = _snapshot(host)
    remove_under(root, "cachedir")
    with pytest.raises(PathOutsideWorkspace):
        remove_under(root, "b/cachedir")
    with pytest.raises(PathOutsideWorkspace):
        copy_between(root, ConfinedRoot(tmp_path / "cache"), "../host/config.yaml")
    assert not (workspace / "cachedir").exists() and _snapshot(host) == before
