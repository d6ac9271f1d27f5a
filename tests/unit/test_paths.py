"""Path confinement: what the workspace server lets the model touch."""

from __future__ import annotations

from pathlib import Path

import pytest

from coding_agent.tools.paths import PathOutsideWorkspace, relative_display, resolve_in_root


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace root and, beside it, a directory the model must never reach."""
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    (root / "src").mkdir(parents=True)
    outside.mkdir()
    (root / "src" / "a.py").write_text("x = 1\n")
    (outside / "secret.txt").write_text("secret\n")
    return root.resolve(), outside.resolve()


def test_relative_path_resolves_under_root(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert resolve_in_root(root, "src/a.py") == root / "src" / "a.py"


def test_empty_and_dot_mean_the_root(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert resolve_in_root(root, "") == root
    assert resolve_in_root(root, ".") == root


def test_absolute_path_inside_root_is_accepted(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert resolve_in_root(root, str(root / "src" / "a.py")) == root / "src" / "a.py"


def test_new_file_in_new_directory_is_accepted(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert resolve_in_root(root, "new/dir/file.txt") == root / "new" / "dir" / "file.txt"


def test_dotdot_that_stays_inside_is_accepted(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert resolve_in_root(root, "src/../src/a.py") == root / "src" / "a.py"


@pytest.mark.parametrize("path", ["../outside/secret.txt", "src/../../outside", "..", "/etc/passwd", "/"])
def test_paths_outside_are_refused(layout: tuple[Path, Path], path: str) -> None:
    root, _ = layout
    with pytest.raises(PathOutsideWorkspace, match="outside the workspace"):
        resolve_in_root(root, path)


def test_symlinked_directory_pointing_outside_is_refused(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (root / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathOutsideWorkspace):
        resolve_in_root(root, "link/secret.txt")
    with pytest.raises(PathOutsideWorkspace):
        resolve_in_root(root, "link/not-yet-created.txt")


def test_symlinked_file_pointing_outside_is_refused(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(PathOutsideWorkspace):
        resolve_in_root(root, "leak.txt")


def test_dangling_symlink_pointing_outside_is_refused(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (root / "dangling").symlink_to(outside / "does-not-exist")
    with pytest.raises(PathOutsideWorkspace):
        resolve_in_root(root, "dangling")


def test_symlink_inside_the_root_is_followed(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    (root / "alias").symlink_to(root / "src", target_is_directory=True)
    assert resolve_in_root(root, "alias/a.py") == root / "src" / "a.py"


def test_symlink_loop_never_escapes(layout: tuple[Path, Path]) -> None:
    """Python 3.11 raises on a loop (refused, naming the path); newer versions keep it literal (inside)."""
    root, _ = layout
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    try:
        resolved = resolve_in_root(root, "loop1/x")
    except PathOutsideWorkspace as error:
        assert "loop1" in str(error)
    else:
        assert root in resolved.parents


def test_nul_character_is_refused(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    with pytest.raises(PathOutsideWorkspace, match="NUL"):
        resolve_in_root(root, "src/a.py\x00.txt")


def test_root_reached_through_a_symlink_is_accepted(layout: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = layout
    alias = tmp_path / "ws-alias"
    alias.symlink_to(root, target_is_directory=True)
    assert resolve_in_root(root, str(alias / "src" / "a.py")) == root / "src" / "a.py"


def test_relative_display(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert relative_display(root / "src" / "a.py", root) == "src/a.py"
    assert relative_display(root, root) == "."
