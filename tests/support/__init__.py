"""What only the tests and benchmarks use: the GitLab sandbox, the GitHub sandbox's
webhook sender, a TCP relay a test cuts, a package index, the real PostgreSQL/RabbitMQ
per test, work trees shaped like a run's checkout, and waiting on a condition.

The sandboxes the demo needs too (the GitHub forge, the replay model) ship in the
product, in `coding_agent.sandbox`.
"""
