"""Planning mode (SPEC 10): plan, act, reflect, revise, verify, complete.

Small modules with one job each: `models` (the plan and where the run stands),
`validation` (reading phase objects, naming each problem), `replies` (phase replies in
both protocols, the native phase tools), `prompts` (the phase requests, from
`prompts/templates/planning/*.j2`), `checklist` (the progress comment's checklist), `scan` (the
verification's placeholder scan), `state` (saving and reading the planning state) and
`driver` (the phases, as a `LoopPolicy` of the one section-4 loop).
"""

from coding_agent.agent.planning.driver import PlanningPolicy
from coding_agent.agent.planning.models import PlanningState
from coding_agent.agent.planning.prompts import render_instructions
from coding_agent.agent.planning.state import PlanningStateError, load_planning_state

__all__ = ["PlanningPolicy", "PlanningState", "PlanningStateError", "load_planning_state", "render_instructions"]
