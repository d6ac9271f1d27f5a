"""Steering (SPEC 8): what a run checks at its checkpoints, and how it pauses and stops.

`RunSteering` (control.py) is the one `Steering` the loop consults: its `checkpoint()`
returns a `Decision` (continue, pause, stop, messages to append). It asks, in order, the
lease, then interrupts.py (pause: signal file, operator request, shutdown; stop: operator
request, bot unassigned), writes the crash checkpoint (state.py), and asks comments.py
for new comments. state.py is also the saved run state (`task_state.json`) a pause or a
takeover continues from; endings.py posts the final comment once and publishes a pause
or a stop.
"""

from coding_agent.agent.steering.control import RunControls, RunSteering
from coding_agent.agent.steering.interrupts import (
    LeaseLost,
    RunInterrupted,
    RunPaused,
    RunStopped,
    ShutdownSignal,
    pause_signal_path,
)
from coding_agent.agent.steering.state import Continuation, RunState, load_state

__all__ = [
    "Continuation",
    "RunSteering",
    "RunControls",
    "ShutdownSignal",
    "pause_signal_path",
    "LeaseLost",
    "RunInterrupted",
    "RunPaused",
    "RunStopped",
    "RunState",
    "load_state",
]
