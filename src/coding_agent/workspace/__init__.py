"""The run's workspace (SPEC 7): a clone of the task's repository, and its delivery at done.

`session.RunWorkspace` is what the runner uses, opened through `session.RunWorkspaces`
(which the runtime owns and hands the runner as the `Workspaces` port); the other modules each do one job
(`git` runs the host's git, `checkout` clones, `rules` reads the repository's agent
instructions, `delivery` commits, pushes and opens or updates the PR/MR).
"""
