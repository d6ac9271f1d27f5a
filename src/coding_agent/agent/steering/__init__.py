"""Steering (SPEC 8): what a run checks at its checkpoints, and how it pauses and stops.

`RunControl` (control.py) is the one `Steering` the loop consults: its `checkpoint()`
returns a `Decision` (continue, pause, stop, messages to append) made by checkpoint.py,
which asks, in order, pause.py (signal file, operator request, shutdown), stop.py (the
bot unassigned) and comments.py (new comments for the model), and has saving.py write the
crash checkpoint. state.py is the saved run state (`task_state.json`) a pause or a
takeover continues from (continuation.py); final.py guards the final comment; endings.py
publishes a pause or a stop.
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
