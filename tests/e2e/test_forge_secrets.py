"""Issue 11 item 16: no secret is stored anywhere the agent writes, the state DB included.

The secrets (forge tokens, LLM key) are random hex strings that no built-in redaction
pattern matches, so only masking the configured secrets *before storing* can pass. The
hostile model echoes them in a step comment and in its final answer (which the store
records before publishing it), and runs `env`. Afterwards every file under the
deployment directory is read as bytes, SQLite databases and their journals included,
and the comments on both forges are searched too.
"""

from __future__ import annotations

from pathlib import Path

from coding_agent.sandbox.replay_model import ReplaySandbox

from .conftest import SECRETS, ForgeUnderTest, llm_section, run_cli, write_config


def test_no_secret_in_any_file_database_or_comment(
    github_forge: ForgeUnderTest, gitlab_forge: ForgeUnderTest, tmp_path: Path
) -> None:
    leaky = {
        "replies": [
            {"tool": "workspace/run", "args": {"command": "env"}, "comment": f"My key might be {SECRETS[2]}"},
            {"done": f"Finished; tokens {SECRETS[0]} {SECRETS[1]} key {SECRETS[2]} should never show."},
        ]
    }
    github_number = github_forge.open_task("issue", "Leak test", "Run env.")
    gitlab_number = gitlab_forge.open_task("issue", "Leak test", "Run env.")
    with ReplaySandbox(leaky) as model:
        setup = write_config(tmp_path, [github_forge, gitlab_forge], llm_section(model))
        result = run_cli(setup, "run", "--once")
    assert result.returncode == 0, result.stderr
    assert "coding agent done" in github_forge.labels("issue", github_number)
    assert "coding agent done" in gitlab_forge.labels("issue", gitlab_number)

    written = [path for path in setup.directory.rglob("*") if path.is_file() and path.name != "config.yaml"]
    assert any(path.suffix == ".db" for path in written), "the state database is among the files searched"
    assert any(path.parent == setup.logs for path in written), "the run wrote a log file"
    haystacks: dict[str, bytes] = {str(path): path.read_bytes() for path in written}
    haystacks["stdout+stderr"] = (result.stdout + result.stderr).encode()
    for forge, number in ((github_forge, github_number), (gitlab_forge, gitlab_number)):
        bodies = "\n".join(body for _, body in forge.comments("issue", number))
        haystacks[f"{forge.name} comments"] = bodies.encode()
    assert b"***" in haystacks["github comments"], "the echoed secret was masked, not dropped"
    for secret in SECRETS:
        for where, data in haystacks.items():
            assert secret.encode() not in data, f"a secret leaked into {where}"
