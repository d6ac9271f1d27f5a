"""`python -m coding_agent.cli`: the same command as the `coding-agent` script."""

import sys

from coding_agent.cli import app

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
