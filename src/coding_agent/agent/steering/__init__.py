"""Steering (SPEC 8): what a run checks at its checkpoints, and how it pauses and stops.

`RunControl` (control.py) is the one `Steering` the loop consults; the parts it asks in
order live in their own modules: pause.py (signal file, operator request, shutdown),
stop.py (the bot unassigned), comments.py (new comments for the model). state.py is the
saved run state (`task_state.json`) a pause or a takeover continues from.
"""

from coding_agent.agent.steering.control import Continuation, RunControl, RunControls
from coding_agent.agent.steering.pause import ShutdownSignal, pause_signal_path
from coding_agent.agent.steering.signals import LeaseLost, RunInterrupted, RunPaused, RunStopped
from coding_agent.agent.steering.state import RunState, load_state

__all__ = [
    "Continuation",
    "RunControl",
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
