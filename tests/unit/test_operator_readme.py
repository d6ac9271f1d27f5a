"""The README stays true (issue 14): every config example in it loads, the config
reference is the one generated from the model, and troubleshooting lists every check
`doctor` runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from coding_agent.config import load_config, parse_config
from coding_agent.config_reference import END, START, reference_markdown, replace_section

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
EXAMPLE = (ROOT / "config.example.yaml").read_text(encoding="utf-8")
ENV = {name: f"value-of-{name.lower()}" for name in ("GITHUB_TOKEN", "GITLAB_TOKEN", "OPENAI_API_KEY", "DASHBOARD_TOKEN")}
EXAMPLES = {
    block.split("\n", 1)[0].removeprefix("# example: "): block
    for block in re.findall(r"```yaml\n(# example: .*?)```", README, flags=re.S)
}


def test_the_readme_has_an_example_for_every_forge_and_provider() -> None:
    names = " ".join(EXAMPLES)
    for needed in ("github", "github enterprise", "gitlab self-managed", "openai-compatible", "ollama", "lmstudio"):
        assert needed in names, needed


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_readme_example_loads(name: str) -> None:
    config = parse_config(yaml.safe_load(EXAMPLES[name]), source=name, env=ENV)
    assert config.llm.active.model


def test_the_example_config_file_loads() -> None:
    config = load_config(ROOT / "config.example.yaml", env=ENV)
    assert config.dashboard.bind == "127.0.0.1:8080"


def test_the_config_reference_is_generated_and_up_to_date() -> None:
    assert START in README and END in README
    assert replace_section(README, reference_markdown(EXAMPLE)) == README, (
        "README.md's config reference is stale: run `coding-agent config-reference --write README.md`"
    )


def test_the_reference_names_every_top_level_key() -> None:
    from coding_agent.config import AgentConfig

    reference = reference_markdown(EXAMPLE)
    for key in AgentConfig.model_fields:
        assert f"| `{key}` |" in reference


def test_troubleshooting_lists_every_doctor_check() -> None:
    section = README.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    for check in ("`config`", "`forge github", "`forge gitlab", "`llm <provider>", "`mcp server", "`sandbox`", "`setup and egress`", "`database`", "`queue`"):
        assert check in section, check


def test_the_first_commands_are_the_two_dev_commands() -> None:
    first = README.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["./dev setup-demo", "./dev test"]
