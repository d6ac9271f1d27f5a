"""Crash safety: a worker killed with SIGKILL at a random moment loses no task (SPEC 13).

Twenty trials, in four lanes side by side: each starts a `run --once` worker and kills it
a random moment after one of its first model requests (while the model "thinks", while a
tool runs, while the agent comments, labels or publishes). Later workers take over what
the dead ones held once their lease expires, and a last one finishes everything left. In the end every task is done exactly once: one final
comment, at most one progress comment per run, at most one pull request, consistent
labels, and no run left `running` in the state store.
"""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox

from tests.support.state import agent_store

from ._steering import spawn_cli, steering_config, wait_for
from .conftest import BOT, HELLO_SCRIPT, REPO, GitHubForge, load_for_service, progress_comments

LANES = 4  # workers killed side by side, each lane with its own replay server
KILLS_PER_LANE = 5  # 4 x 5 = 20 trials
# Enough tasks that the lanes do not run out of work before their 20 kills: a worker the
# kill misses (it fell after the run's last reply, or a takeover needed fewer replies)
# finishes the tasks it finds, and once every task is done no later worker can be killed
# mid-work. With 10, one CI run ended with a lane at 4 kills of 5 after its 15 attempts.
TASKS = 16
LEASE_SECONDS = 2.0


def _script() -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"tool": "workspace/create", "args": {"path": f"f{n}.txt", "content": f"{n}\n"}, "comment": f"Writing f{n}.txt."}
        for n in range(3)
    ]
    steps.append({"done": "Wrote the files."})
    return {"latency_seconds": 0.03, "replies": [{**step, "before": {"tick": {}}} for step in steps]}


class Killer:
    """Counts one lane's model requests; kills its worker a random moment after the chosen one."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.victim: subprocess.Popen[str] | None = None
        self.ticks = 0
        self.kill_at = 0
        self._lock = threading.Lock()

    def aim(self, victim: subprocess.Popen[str] | None) -> None:
        with self._lock:
            self.victim, self.ticks, self.kill_at = victim, 0, self.random.randint(1, 3)

    def __call__(self, _: dict[str, Any]) -> None:
        with self._lock:
            self.ticks += 1
            if self.victim is None or self.ticks != self.kill_at:
                return
            victim, delay = self.victim, self.random.uniform(0.0, 0.25)
        threading.Timer(delay, victim.kill).start()


def _lane_config(setup_path: Path, model: ReplaySandbox, name: str, **changes: Any) -> Path:
    """The shared config, pointed at this lane's replay server."""
    data = yaml.safe_load(setup_path.read_text())
    data["llm"]["openai"]["base_url"] = model.openai_base_url
    data.update(changes)
    path = setup_path.with_name(f"{name}.yaml")
    path.write_text(yaml.safe_dump(data))
    return path


def _lane(config_path: Path, killer: Killer) -> tuple[int, list[tuple[int, int]]]:
    """Start workers one after another until KILLS_PER_LANE of them were killed mid-work:
    the kills, and (exit code, model requests) of each worker the kill missed, which is
    what a lane short of kills has to show for it."""
    kills, missed = 0, []
    while kills < KILLS_PER_LANE and kills + len(missed) < 3 * KILLS_PER_LANE:
        victim = spawn_cli(config_path, "run", "--once", output=subprocess.DEVNULL)
        killer.aim(victim)
        victim.wait(timeout=120)
        requests = killer.ticks
        killer.aim(None)
        if victim.returncode == -9:
            kills += 1
        else:
            missed.append((victim.returncode, requests))
    return kills, missed


@pytest.mark.long
def test_sigkilled_workers_lose_no_task(github_forge: GitHubForge, tmp_path: Path) -> None:
    numbers = [github_forge.open_task("issue", f"Task {n}", f"Please write the files ({n}).") for n in range(TASKS)]
    keys = [f"github:{REPO}#{number}" for number in numbers]
    killers = [Killer(seed=2024 + lane) for lane in range(LANES)]
    with ExitStack() as stack:
        models = [stack.enter_context(ReplaySandbox(_script(), actions={"tick": k})) for k in killers]
        setup = steering_config(tmp_path, [github_forge], models[0], scheduling={"lease_seconds": LEASE_SECONDS})
        lanes = [_lane_config(setup.config_path, model, f"lane{n}") for n, model in enumerate(models)]
        with agent_store(tmp_path) as store:
            with ThreadPoolExecutor(LANES) as pool:
                kills, missed = zip(*pool.map(lambda n: _lane(lanes[n], killers[n]), range(LANES)))
            wait_for(lambda: all(store.leases.lease_owner(key) is None for key in keys), 30, "the dead workers' leases to expire")
            survivor_config = _lane_config(setup.config_path, models[0], "survivor", workers=TASKS)
            survivor = spawn_cli(survivor_config, "run", "--once")
            _, err = survivor.communicate(timeout=120)
            assert survivor.returncode == 0, err
            runs = store.runs.all()

    assert list(kills) == [KILLS_PER_LANE] * LANES, f"every trial killed its worker mid-work; missed: {missed}"
    log_text = "".join(path.read_text(errors="replace") for path in setup.logs.glob("*.log"))
    assert re.search(r"run \S+ continued", log_text), "some runs went on from their saved step"
    for number, key in zip(numbers, keys):
        labels = github_forge.labels("issue", number)
        lifecycle = [label for label in labels if label.startswith("coding agent")]
        assert lifecycle == ["coding agent done"], (key, labels)
        bodies = [body for author, body in github_forge.comments("issue", number) if author == BOT]
        progress = progress_comments(bodies)
        finals = [body for body in bodies if body not in progress]
        assert len(finals) == 1, (key, finals)
        task_runs = [run for run in runs if run.task_key == key]
        assert [run.status for run in task_runs].count("done") == 1, (key, task_runs)
        assert {run.status for run in task_runs} <= {"done", "abandoned"}, (key, task_runs)
        progress_runs = [re.search(r"run `([0-9a-f-]+)`", body).group(1) for body in progress]  # type: ignore[union-attr]
        assert len(progress_runs) == len(set(progress_runs)) and set(progress_runs) <= {r.uuid for r in task_runs}
        pulls = [p for p in github_forge.sandbox.state.pulls(REPO) if (p.head or "").startswith(f"coding-agent/{number}-")]
        assert len(pulls) <= 1, (key, pulls)


def test_a_run_whose_worker_died_after_its_end_was_out_is_not_run_again(github_forge: GitHubForge, tmp_path: Path) -> None:
    """The worker published the end (labels, final comment), moved the run's files to
    `completed/`, and died before the state store recorded it: the store still says
    `running`, with a lease that runs out. The next cycle used to find no state to
    continue from and start the task again: a second run and a second final comment."""
    number = github_forge.open_task("issue", "Greet", "Please add hello.txt.")
    key = f"github:{REPO}#{number}"
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model)

        async def cycle() -> list[str]:
            service = AgentService(load_for_service(setup))
            try:
                return [result.status for result in (await service.run_cycle()).results]
            finally:
                await service.aclose()

        assert asyncio.run(cycle()) == ["done"]
        with agent_store(tmp_path) as store:
            [run] = store.runs.all()
            with store.engine.begin() as connection:  # as the dead worker left it
                connection.execute(text("UPDATE runs SET status = 'running', finished_at = NULL WHERE uuid = :u"), {"u": run.uuid})
            assert store.leases.acquire_lease(key, "dead-worker", -1.0)  # already run out
            assert asyncio.run(cycle()) == []
            runs = store.runs.all()
    assert [(r.uuid, r.status) for r in runs] == [(run.uuid, "done")]
    bodies = [body for author, body in github_forge.comments("issue", number) if author == BOT]
    assert len([body for body in bodies if body not in progress_comments(bodies)]) == 1, bodies
    assert [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")] == [
        "coding agent done"
    ]
