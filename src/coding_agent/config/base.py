"""The base of every config model: unknown keys are errors, assignments are validated.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = []


class _Strict(BaseModel):
    """Base of every section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
