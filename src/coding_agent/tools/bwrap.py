"""The bubblewrap command line of the sandbox (SPEC 15), as a small pure function.

What a command the model runs may see and do:
- no capabilities, also when the agent runs as root (`--cap-drop ALL`: bwrap started
  by root keeps every capability otherwise, and `mount` would remount host paths);
- its own namespaces (`--unshare-all`: no network, its own PID namespace and /proc),
  its own session (`--new-session`: no TIOCSTI into the agent's terminal), and it dies
  with the server that started it (`--die-with-parent`);
- an environment of PATH, HOME, LANG, TERM only (`--clearenv`), plus what the caller
  adds on purpose (the egress proxy's variables, for example);
- a filesystem of the workspace (read-write), a private /tmp, and read-only system
  directories a build needs. Never `/` as a whole: the config file, the state database,
  the context and log directories, other runs' workspaces, /root and /home are simply
  not there.

`bwrap_argv` builds the argument list from its inputs alone; extra binds and variables
are additive (`Bind`, `extra_env`), so other features (the egress proxy's socket) add
to it without changing it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Bind", "SANDBOX_PATH", "SYSTEM_DIRECTORIES", "SYSTEM_FILES", "bwrap_argv", "sandbox_environment"]

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Read-only, bound when they exist. /bin, /lib* and /sbin are symlinks into /usr on
# merged-/usr systems; `--ro-bind` of the link's path binds what it points at.
SYSTEM_DIRECTORIES: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# What programs read from /etc: TLS roots, the dynamic linker's cache, the alternatives
# links (`python3`, `java`, `editor`), names of users and groups (world-readable, no
# hashes), the time zone, Java's security settings. Not /etc as a whole: it holds
# /etc/shadow, credential helpers in /etc/gitconfig, and service configs. Each entry is
# a mount (about a millisecond of `run`'s start), so the list is kept to what is needed.
SYSTEM_FILES: tuple[str, ...] = (
    "/etc/ssl",
    "/etc/pki",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/java-17-openjdk",
    "/etc/java-21-openjdk",
)


@dataclass(frozen=True)
class Bind:
    """One more path to show inside the sandbox (`dest` defaults to `source`)."""

    source: str
    dest: str | None = None
    writable: bool = False


def sandbox_environment(lang: str | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed command: PATH, HOME, LANG and TERM.

    HOME is the private /tmp, so tools that keep caches under HOME keep working.
    """
    return {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": lang or "C.UTF-8", "TERM": "dumb"}


def _existing(paths: Sequence[str]) -> list[str]:
    return [path for path in paths if os.path.lexists(path)]


def bwrap_argv(
    command: Sequence[str],
    root: Path,
    *,
    bwrap: str = "bwrap",
    extra_binds: Sequence[Bind] = (),
    extra_env: Mapping[str, str] | None = None,
    lang: str | None = None,
    system_paths: Sequence[str] | None = None,
    tmp_size_bytes: int | None = None,
) -> list[str]:
    """The bwrap argument list that runs `command` (argv) with `root` as its one writable tree.

    Mount order matters: the private /tmp comes before the workspace bind, so a workspace
    that lives under /tmp is still visible. `system_paths` defaults to the directories
    and /etc entries above that exist on this machine. `tmp_size_bytes` caps each private
    /tmp and /var/tmp (they are memory: the setup's limit on what it may write keeps a
    runaway from filling the host's RAM); unset, tmpfs's own default (half the RAM).
    """
    root_text = str(root)
    argv = [bwrap, "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv"]
    for path in _existing([*SYSTEM_DIRECTORIES, *SYSTEM_FILES]) if system_paths is None else system_paths:
        link = os.readlink(path) if os.path.islink(path) and path in SYSTEM_DIRECTORIES else None
        # /bin -> usr/bin on merged-/usr systems: the same link inside, not a second bind.
        argv += ["--symlink", link, path] if link and not link.startswith("/") else ["--ro-bind", path, path]
    size = ["--size", str(tmp_size_bytes)] if tmp_size_bytes else []
    argv += ["--dev", "/dev", "--proc", "/proc", *size, "--tmpfs", "/tmp", *size, "--tmpfs", "/var/tmp"]
    argv += ["--bind", root_text, root_text]
    for bind in extra_binds:
        argv += ["--bind" if bind.writable else "--ro-bind", bind.source, bind.dest or bind.source]
    for name, value in {**sandbox_environment(lang), **(extra_env or {})}.items():
        argv += ["--setenv", name, value]
    argv += ["--chdir", root_text, "--", *command]
    return argv
