"""How the host runs git on a workspace the model has written to (SPEC 15).

The model can write any file in the work tree, so nothing git would *obey* may live
there. The repository's git directory is kept outside the workspace (`git_dir_for`:
a hidden sibling the sandbox never sees, since only the workspace is bound into it),
and every host git command names it explicitly (`GIT_DIR`, `GIT_WORK_TREE`), so a
`.git` file or directory the model plants in the work tree is never read.

Every host git command also runs with a configuration only the host writes: no system
or global config files (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), so no
include, credential helper, proxy or filter driver from them; and `HARDENING`, given
through `GIT_CONFIG_COUNT` (the highest-precedence scope), switches off whatever would
run a program or reach out: hooks, fsmonitor, submodule recursion, the `file` and `ext`
transports, signing. The repository's own config is written by the host's clone and
never by the model. `.gitattributes` in the work tree is the model's: the git
directory's `info/attributes` (which takes precedence over it) unsets filter, diff and
merge drivers for every path (`ATTRIBUTES`).

Both the workspace server (`git_status`, `git_diff`) and the host's delivery
(`workspace/git.py`) use this module, so there is one definition of "safe git".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["ATTRIBUTES", "HARDENING", "git_dir_for", "git_dirs_beside", "hardened_git_environment", "install_attributes"]

HARDENING: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.attributesFile", os.devnull),
    ("core.excludesFile", os.devnull),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("protocol.ext.allow", "never"),
    ("protocol.file.allow", "never"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("safe.bareRepository", "explicit"),
    # No `git maintenance run --auto` / `gc --auto` after a fetch or a commit: a run's
    # clone lives minutes, and the mirror must never drop an object a clone borrows.
    ("maintenance.auto", "false"),
    ("gc.auto", "0"),
)

# `$GIT_DIR/info/attributes` outranks every `.gitattributes` in the work tree.
ATTRIBUTES = "# coding-agent: no filter, diff or merge driver from the work tree\n* !filter !diff !merge\n"


def git_dir_for(workspace: Path) -> Path:
    """The git directory of `workspace`, never inside it: `<base>.git-dirs/<name>`.

    The workspaces' base directory holds only workspaces (one per run, as before); the
    git directories are in a directory beside it, which no sandbox binds.
    """
    return git_dirs_beside(workspace.parent) / workspace.name


def git_dirs_beside(workspaces: Path) -> Path:
    """The directory of the git directories of the workspaces under `workspaces`."""
    return Path(f"{workspaces}.git-dirs")


def install_attributes(git_dir: Path) -> None:
    """Write the git directory's `info/attributes` (host-side; the sandbox never sees it)."""
    info = git_dir / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "attributes").write_text(ATTRIBUTES, encoding="utf-8")


def hardened_git_environment(
    base: Mapping[str, str],
    *,
    work_tree: Path | None = None,
    settings: tuple[tuple[str, str], ...] = (),
) -> dict[str, str]:
    """`base` plus what every host git command runs with.

    `work_tree`: the workspace; its git directory (`git_dir_for`) is named explicitly.
    `settings`: more `-c`-style settings (the push's credential header) given through
    the environment, where other users of the machine cannot read them (unlike argv).
    """
    env = dict(base)
    for name in [name for name in env if name.startswith("GIT_")]:
        del env[name]  # GIT_DIR, GIT_CONFIG_PARAMETERS, ... from outside must not steer it
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_ASKPASS": "",
            "SSH_ASKPASS": "",
        }
    )
    if work_tree is not None:
        env["GIT_DIR"] = str(git_dir_for(work_tree))
        env["GIT_WORK_TREE"] = str(work_tree)
    pairs = [*HARDENING, *settings]
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env
