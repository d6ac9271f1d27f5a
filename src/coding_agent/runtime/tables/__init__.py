"""The state store's table families, one module each, on one engine (`base.py`):
leases, runs with their token usage, the run's steering marks (operator requests and
what a run must never do twice), and trigger rejections. `runtime/state_store.py`
composes them into the one `StateStore` the runtime hands around."""
