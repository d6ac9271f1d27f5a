"""The agent's own notices on the issue, in the configured `language` (en or ja).

Only the agent's own words live here (error, limit, refusal); the model writes the rest.
One table per language (`templates/notices/<language>.yaml`), each notice under the
same name in every language, so that a notice is worded once and translated once.
"""

from __future__ import annotations

from importlib import resources
from typing import Literal, get_args

import yaml

__all__ = ["notice", "Language"]

Language = Literal["en", "ja"]


def _load(language: Language) -> dict[str, str]:
    path = resources.files("coding_agent.prompts").joinpath("templates", "notices", f"{language}.yaml")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# One file per language under templates/notices/, read once: name -> str.format text.
_NOTICES: dict[Language, dict[str, str]] = {language: _load(language) for language in get_args(Language)}


def notice(name: str, language: Language, **values: object) -> str:
    """The notice `name` in `language`, with `values` filled in."""
    return _NOTICES[language][name].format(**values)
