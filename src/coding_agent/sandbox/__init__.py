"""The sandboxes `coding-agent demo` runs on this machine: a GitHub-compatible forge with
real git repositories behind it (`github/`, its playground page for `demo --serve`) and the
replay model (`replay_model.py`, a scripted model that says so), on a background server.

They are part of the product because the demo ships with it; the tests use them too.
What only tests use (the GitLab sandbox, relays, the package index, wait helpers) lives
in `tests/support/`.
"""
