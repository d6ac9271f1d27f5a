"""Producer, queue and workers (SPEC 11.1): no cycle barrier in `serve`, and the split
roles on a real RabbitMQ and PostgreSQL: two `worker` processes share the work, a worker
killed mid-run has its message redelivered and the task finished once."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import unquote_plus, urlsplit, urlunsplit
from typing import Any

import aio_pika
import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from coding_agent.runtime.queue import QueuedTask
from coding_agent.runtime.queue.memory import MemoryQueue
from coding_agent.runtime.queue.rabbitmq import RabbitQueue
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.queue_entries import QueueEntries
from coding_agent.store.state import StateStore
from tests.support.services import amqp_url
from tests.support.tcp_relay import TcpRelay
from tests.support.waiting import wait_for, wait_until

from ._steering import distributed_config, spawn_cli, steering_config, user_messages
from .conftest import BOT, HELLO_SCRIPT, MAINTAINER, READER, REPO, GitHubForge, load_for_service, progress_comments


def _finals(forge: GitHubForge, number: int) -> list[str]:
    bodies = [body for author, body in forge.comments("issue", number) if author == BOT]
    return [body for body in bodies if body not in progress_comments(bodies)]


def test_a_task_labelled_while_a_long_one_runs_starts_before_it_ends(github_forge: GitHubForge, tmp_path: Path) -> None:
    """`serve` with two slots: the long task's model waits, inside its second reply, until
    the quick task has started; with a cycle barrier it never would (the wait times out)."""
    events: list[tuple[str, str]] = []
    quick: list[int] = []

    def label_quick(_: dict[str, Any]) -> None:
        quick.append(github_forge.open_task("issue", "Quick task", "Please add hello.txt."))

    def wait_for_quick(_: dict[str, Any]) -> None:
        key = f"github:{REPO}#{quick[0]}"
        wait_for(lambda: ("started", key) in events, 60, "the quick task to start while the long one runs")

    long_replies = [
        {**HELLO_SCRIPT["replies"][0], "before": {"label_quick": {}}},
        {"tool": "workspace/view", "args": {"path": "hello.txt"}, "comment": "Checking.", "before": {"wait_for_quick": {}}},
        {"done": "Long task done."},
    ]
    script = {"conversations": [{"match": "Long task", "replies": long_replies}], "replies": HELLO_SCRIPT["replies"]}
    long_number = github_forge.open_task("issue", "Long task", "Please add hello.txt, slowly.")
    actions = {"label_quick": label_quick, "wait_for_quick": wait_for_quick}
    with ReplaySandbox(script, actions=actions) as model:
        setup = steering_config(tmp_path, [github_forge], model, workers=2, scheduling={"interval_seconds": 0.2})

        async def serve() -> None:
            service = AgentService(load_for_service(setup))
            service.workers.on_event = lambda event, key: events.append((event, key))
            stop = asyncio.Event()
            serving = asyncio.create_task(service.serve(stop))
            try:
                await wait_until(
                    lambda: sum(event == "ended" for event, _ in events) >= 2 or serving.done(), 180, "both tasks to end"
                )
            finally:
                stop.set()
                await serving
                await service.aclose()

        asyncio.run(asyncio.wait_for(serve(), 240))

    long_key, quick_key = f"github:{REPO}#{long_number}", f"github:{REPO}#{quick[0]}"
    assert events.index(("started", quick_key)) < events.index(("ended", long_key)), events
    for number in (long_number, quick[0]):
        assert [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")] == [
            "coding agent done"
        ]
        assert len(_finals(github_forge, number)) == 1


@pytest.mark.parametrize("mode", ["run --once", "serve"])
def test_a_discovered_task_starts_while_the_follow_up_searches_are_still_out(
    github_forge: GitHubForge, tmp_path: Path, mode: str
) -> None:
    """A poll's labelled task is offered as soon as its search is answered, and `run
    --once` works it while the poll goes on: the follow-up search (done items that
    @mention the bot) is held by the forge until the task's model has been asked. With
    the offers made only after every search (and `run --once` working only after the
    whole poll), the model is never asked while that search is out."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    searched: list[int] = []
    gate = threading.Event()

    def followup_searches() -> int:
        return sum(
            r.path == "/search/issues" and "mentions:" in unquote_plus(r.query) for r in github_forge.sandbox.state.requests()
        )

    def note_the_search_and_open_the_gate(_: dict[str, Any]) -> None:
        searched.append(followup_searches())
        gate.set()

    github_forge.sandbox.faults.add(Fault(r"^GET /search/issues$", query="mentions:", status=None, hold=gate))
    script = {"replies": [{**HELLO_SCRIPT["replies"][0], "before": {"note": {}}}, *HELLO_SCRIPT["replies"][1:]]}
    with ReplaySandbox(script, actions={"note": note_the_search_and_open_the_gate}) as model:
        setup = steering_config(tmp_path, [github_forge], model, scheduling={"interval_seconds": 0.2})

        async def work() -> list[str]:
            service = AgentService(load_for_service(setup))
            events: list[str] = []
            service.workers.on_event = lambda what, _: events.append(what)
            try:
                if mode == "run --once":
                    return [result.status for result in (await service.run_cycle()).results]
                stop = asyncio.Event()
                serving = asyncio.create_task(service.serve(stop))
                await wait_until(lambda: "ended" in events or serving.done(), 120, "the task's run to end")
                stop.set()
                await serving
                return ["done"] if "coding agent done" in github_forge.labels("issue", number) else events
            finally:
                gate.set()
                await service.aclose()

        assert asyncio.run(asyncio.wait_for(work(), 180)) == ["done"]
    assert searched == [0], "the model was asked while the follow-up search was still out"
    assert followup_searches() >= 1, "and the poll went on to search for follow-ups"
    assert len(_finals(github_forge, number)) == 1


def test_a_redelivered_message_of_a_task_running_here_leaves_its_run_alone(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    """RabbitMQ hands an unacknowledged message back after a dropped connection, possibly
    to the same process while its run goes on. That delivery must find nothing to do: a
    claim that took "already ours" as a fresh lease handed the running run's lease back
    when it found nothing new, and the redelivery's takeover then started the same run a
    second time beside the first."""
    number = github_forge.open_task("issue", "Long task", "Please add hello.txt.")
    key = f"github:{REPO}#{number}"
    redelivery_over = threading.Event()

    def wait_for_redelivery(_: dict[str, Any]) -> None:
        wait_for(redelivery_over.is_set, 60, "the redelivered message to be handled")

    replies = [
        {**HELLO_SCRIPT["replies"][0], "before": {"wait_for_redelivery": {}}},
        *HELLO_SCRIPT["replies"][1:],
    ]
    events: list[tuple[str, str]] = []
    with ReplaySandbox({"replies": replies}, actions={"wait_for_redelivery": wait_for_redelivery}) as model:
        setup = steering_config(tmp_path, [github_forge], model, workers=2)

        async def cycle() -> tuple[Any, list[str], str | None, str | None]:
            service = AgentService(load_for_service(setup))
            service.workers.on_event = lambda event, key: events.append((event, key))
            try:
                cycle = asyncio.create_task(service.run_cycle())
                await wait_until(lambda: bool(model.requests), 60, "the run's first model request")
                try:
                    second = await asyncio.wait_for(service.workers.handle(QueuedTask(key, "new"), redelivered=True), 30)
                finally:
                    redelivery_over.set()
                holder = await asyncio.to_thread(service.store.leases.lease_owner, key)
                entry = (await asyncio.to_thread(service.entries.states)).get(key)
                results = (await cycle).results
                return second, [result.status for result in results], holder if holder != service.owner else None, entry
            finally:
                await service.aclose()

        second, statuses, stranger, entry = asyncio.run(asyncio.wait_for(cycle(), 240))

    assert second is None, second
    assert stranger is None, "the running run kept its lease"
    assert entry == "running", "the running run's queue entry stays (so the task is not queued again meanwhile)"
    assert statuses == ["done"]
    assert [event for event, _ in events].count("started") == 1, events
    assert len(_finals(github_forge, number)) == 1
    assert [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")] == [
        "coding agent done"
    ]


def test_a_redelivery_of_a_task_another_worker_holds_is_put_back_until_its_lease_runs_out(
    github_forge: GitHubForge, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A redelivered message whose task another worker's lease holds (its worker may have
    stopped) does not keep its slot waiting for that lease: it is put back, as a run to
    continue, to come again when the lease runs out; the other worker's lease is left
    alone and nothing starts."""
    number = github_forge.open_task("issue", "Held elsewhere", "Please add hello.txt.")
    key = f"github:{REPO}#{number}"
    with ReplaySandbox({"replies": []}) as model:
        setup = steering_config(tmp_path, [github_forge], model, scheduling={"lease_seconds": 60})

        async def redelivered() -> tuple[Any, str | None, frozenset[str], int]:
            service = AgentService(load_for_service(setup))
            queue = MemoryQueue()
            try:
                assert await asyncio.to_thread(service.store.leases.acquire_lease, key, "worker-elsewhere", 60)
                outcome = await asyncio.wait_for(service.workers.handle(QueuedTask(key, "new"), True, queue), 30)
                held = (await queue.held()).keys
                return outcome, await asyncio.to_thread(service.store.leases.lease_owner, key), held, queue.depth()
            finally:
                await service.aclose()

        with caplog.at_level("INFO"):
            outcome, holder, held, ready = asyncio.run(asyncio.wait_for(redelivered(), 120))

    assert outcome is None, outcome
    assert holder == "worker-elsewhere", "the other worker's lease is left alone"
    assert held == {key} and ready == 0, "put back, to be handed out only later"
    assert f"{key}: redelivered while worker-elsewhere holds its lease; put back" in caplog.text
    assert model.requests == [], "no run started"


# -- RabbitMQ + PostgreSQL ------------------------------------------------------------------


async def _produce_once(config: Any) -> list[QueuedTask]:
    service = AgentService(config)
    try:
        return list((await service.producer.cycle(await service.queue())).enqueued)
    finally:
        await service.aclose()


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    return err


def _work_queued_tasks(
    forge: GitHubForge, setup: Any, url: str, tasks: int, processes: int
) -> tuple[list[int], list[Any], list[subprocess.Popen[str]], list[str]]:
    """`tasks` issues opened and queued by one producer cycle, worked by `processes`
    `worker` processes until every task's run is done (or a worker exits), then each
    worker stopped: the issues' numbers, the runs, the workers and their stderr."""
    numbers = [forge.open_task("issue", f"Task {n}", f"Please add hello.txt ({n}).") for n in range(tasks)]
    assert len(asyncio.run(_produce_once(load_for_service(setup)))) == tasks
    workers = [spawn_cli(setup.config_path, "worker") for _ in range(processes)]
    store = StateStore(url)
    try:
        wait_for(
            lambda: len([run for run in store.runs.all() if run.status == "done"]) >= tasks
            or any(worker.poll() is not None for worker in workers),
            900,
            f"{tasks} runs done",
        )
        runs = store.runs.all()
    finally:
        store.close()
        errors = [_stop(worker) for worker in workers]
    return numbers, runs, workers, errors


@pytest.mark.long
def test_two_worker_processes_share_32_tasks_each_done_once(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str]
) -> None:
    url, name = distributed
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = distributed_config(tmp_path, github_forge, model, url, name, workers=4)
        numbers, runs, workers, errors = _work_queued_tasks(github_forge, setup, url, 32, processes=2)

    assert [worker.returncode for worker in workers] == [0, 0], errors
    assert sorted(run.task_key for run in runs) == sorted(f"github:{REPO}#{n}" for n in numbers), "one run per task"
    assert {run.status for run in runs} == {"done"}
    owners = {run.owner.rsplit("-", 1)[0] for run in runs}  # host-pid of each worker process
    assert len(owners) == 2, f"each worker did some: {owners}"
    for number in numbers:
        assert len(_finals(github_forge, number)) == 1, number


def test_a_sigkilled_worker_s_task_is_redelivered_and_finished_once(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str]
) -> None:
    url, name = distributed
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    killed: list[bool] = []
    victims: list[subprocess.Popen[str]] = []

    def kill_worker(_: dict[str, Any]) -> None:
        if not killed:  # the first worker only; its successor gets the same reply again
            killed.append(True)
            os.kill(victims[0].pid, signal.SIGKILL)
            victims[0].wait(30)

    replies = [{**HELLO_SCRIPT["replies"][0], "before": {"kill_worker": {}}}, *HELLO_SCRIPT["replies"][1:]]
    with ReplaySandbox({"replies": replies}, actions={"kill_worker": kill_worker}) as model:
        setup = distributed_config(tmp_path, github_forge, model, url, name, scheduling={"lease_seconds": 3.0})
        assert len(asyncio.run(_produce_once(load_for_service(setup)))) == 1
        victims.append(spawn_cli(setup.config_path, "worker"))
        wait_for(lambda: killed, 120, "the first worker to reach its model call")
        successor = spawn_cli(setup.config_path, "worker")
        store = StateStore(url)
        try:
            wait_for(lambda: [run.status for run in store.runs.all()] == ["done"], 240, "the task to be finished")
            runs = store.runs.all()
        finally:
            store.close()
            error = _stop(successor)

    assert victims[0].returncode == -signal.SIGKILL
    assert successor.returncode == 0, error
    assert [run.status for run in runs] == ["done"], "the killed run was continued, not started again"
    assert len(_finals(github_forge, number)) == 1
    assert [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")] == [
        "coding agent done"
    ]


@pytest.mark.long
def test_a_sigkilled_worker_s_tasks_wait_for_its_lease_while_the_survivor_works_others(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str]
) -> None:
    """`producer` and two `worker` processes (two slots each) on six tasks, the default
    lease. The first worker is SIGKILLed while both its runs hold their leases; the
    second, started then, gets their messages back first. It puts them back until the
    dead worker's leases run out and works the other tasks meanwhile (it used to wait
    for those leases in both its slots, starting nothing), then continues the two: every
    task done once."""
    url, name = distributed
    numbers = [github_forge.open_task("issue", f"Task {n}", "Please add hello.txt.") for n in range(6)]
    keys = [f"github:{REPO}#{n}" for n in numbers]
    store = StateStore(url)
    processes: dict[str, subprocess.Popen[str]] = {}
    held_at_kill: dict[str, float] = {}  # the dead worker's task keys: when their leases run out
    lock = threading.Lock()

    def victim_leases() -> dict[str, float]:
        victim = f"-{processes['victim'].pid}-"
        leases = {key: store.leases.live_lease(key) for key in keys}
        return {key: time.time() + lease.seconds_left for key, lease in leases.items() if lease and victim in lease.owner}

    def kill_the_first_worker(_: dict[str, Any]) -> None:
        with lock:
            if held_at_kill:
                return
            wait_for(lambda: len(victim_leases()) == 2, 120, "both of the first worker's runs to hold their leases")
            os.kill(processes["victim"].pid, signal.SIGKILL)
            processes["victim"].wait(30)
            held_at_kill.update(victim_leases())

    replies = [{**HELLO_SCRIPT["replies"][0], "before": {"kill": {}}}, *HELLO_SCRIPT["replies"][1:]]
    try:
        with ReplaySandbox({"replies": replies}, actions={"kill": kill_the_first_worker}) as model:
            setup = distributed_config(tmp_path, github_forge, model, url, name, workers=2, scheduling={"interval_seconds": 1})
            assert "lease_seconds" not in setup.config_path.read_text(), "the default lease"
            assert len(asyncio.run(_produce_once(load_for_service(setup)))) == 6
            processes["victim"] = spawn_cli(setup.config_path, "worker")
            wait_for(lambda: held_at_kill, 180, "the first worker to be killed")
            processes["survivor"] = spawn_cli(setup.config_path, "worker")
            processes["producer"] = spawn_cli(setup.config_path, "producer")
            wait_for(
                lambda: [run.status for run in store.runs.all()].count("done") >= 6
                or any(processes[role].poll() is not None for role in ("survivor", "producer")),
                600,
                "six runs done",
            )
            runs = store.runs.all()
    finally:
        store.close()
        errors = {role: _stop(process) for role, process in processes.items() if role != "victim"}

    assert processes["victim"].returncode == -signal.SIGKILL
    assert [processes[role].returncode for role in ("survivor", "producer")] == [0, 0], errors
    done = sorted(run.task_key for run in runs if run.status == "done")
    assert done == sorted(keys), "every task done once"
    survivor = f"-{processes['survivor'].pid}-"
    others = [run for run in runs if run.task_key not in held_at_kill and survivor in run.owner]
    assert any(run.started_at < min(held_at_kill.values()) for run in others), (
        "the survivor started other tasks before the dead worker's leases ran out"
    )
    for number in numbers:
        assert len(_finals(github_forge, number)) == 1, number


async def _purge(name: str) -> int:
    """Drop every message waiting in the queue, as an operator's purge would."""
    connection = await aio_pika.connect_robust(amqp_url())
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, passive=True)
        purged = await queue.purge()
        return int(purged.message_count)


def test_queued_tasks_whose_broker_messages_were_purged_are_offered_again(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str]
) -> None:
    """A producer queued three tasks, then the broker lost their messages (a purge): their
    entries in the store still say `queued`. A `producer` finds the queue holding nothing
    and offers them again, and a `worker` does each once."""
    url, name = distributed
    numbers = [github_forge.open_task("issue", f"Task {n}", "Please add hello.txt.") for n in range(3)]
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = distributed_config(tmp_path, github_forge, model, url, name, workers=2, scheduling={"interval_seconds": 0.5})
        assert len(asyncio.run(_produce_once(load_for_service(setup)))) == 3
        assert asyncio.run(_purge(name)) == 3
        processes = [spawn_cli(setup.config_path, role) for role in ("producer", "worker")]
        store = StateStore(url)
        try:
            wait_for(
                lambda: [run.status for run in store.runs.all()].count("done") >= 3 or any(p.poll() is not None for p in processes),
                300,
                "three runs done",
            )
            runs = [(run.task_key, run.status) for run in store.runs.all()]
        finally:
            store.close()
            errors = [_stop(process) for process in processes]

    assert [process.returncode for process in processes] == [0, 0], errors
    assert sorted(runs) == sorted((f"github:{REPO}#{n}", "done") for n in numbers), "each task once"
    # One poll may release all three or, when the grace's end falls between their offers
    # (a loaded machine spreads them), two polls the rest: each entry is released once.
    logged = errors[0] + "".join(p.read_text() for p in setup.logs.glob("*.log*"))
    assert sum(int(n) for n in re.findall(r"(\d+) queued task\(s\) had no message left", logged)) == 3, logged[-3000:]
    for number in numbers:
        assert len(_finals(github_forge, number)) == 1, number


def _serve_until_two_done(setup: Any) -> list[tuple[str, str]]:
    """`serve` until two runs are done (or it ends early, raising what ended it): every
    run's (task key, status)."""

    async def serve() -> list[tuple[str, str]]:
        service = AgentService(load_for_service(setup))
        stop = asyncio.Event()
        serving = asyncio.create_task(service.serve(stop))

        def over() -> bool:
            try:
                return [run.status for run in service.store.runs.all()].count("done") >= 2 or serving.done()
            except OperationalError:  # this look, too, goes through a database that may be away
                return serving.done()

        try:
            await wait_until(over, 180, "both tasks to be done")
            return [(run.task_key, run.status) for run in service.store.runs.all()]
        finally:
            stop.set()
            await serving  # raises what ended it early
            await service.aclose()

    return asyncio.run(asyncio.wait_for(serve(), 240))


def test_a_broker_lost_mid_run_ends_nothing_and_the_work_goes_on_once_it_is_back(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """`serve` on RabbitMQ; the broker's connection drops while a run works, and stays
    away while a second task is labelled. The run goes on to its end; the producer's
    cycles that cannot enqueue say so and end (a publish raised, and the producer, then
    `serve`, died of it); acknowledging the message that came over the lost connection is
    a no-op (it raised and ended the worker's slot); once the broker is back, the second
    task is queued and worked, and each task ran once."""
    url, name = distributed
    first = github_forge.open_task("issue", "First task", "Please add hello.txt.")
    second: list[int] = []

    def lose_the_broker(_: dict[str, Any]) -> None:
        relay.refusing = True
        relay.cut()
        second.append(github_forge.open_task("issue", "Second task", "Please add hello.txt too."))
        wait_for(lambda: "the broker cannot be reached" in caplog.text, 60, "a producer cycle to find the broker away")
        relay.refusing = False

    replies = [{**HELLO_SCRIPT["replies"][0], "before": {"lose_the_broker": {}}}, *HELLO_SCRIPT["replies"][1:]]
    script = {"conversations": [{"match": "First task", "replies": replies}], "replies": HELLO_SCRIPT["replies"]}
    with TcpRelay("127.0.0.1", 5672) as relay, ReplaySandbox(script, actions={"lose_the_broker": lose_the_broker}) as model:
        relayed = f"amqp://guest:guest@127.0.0.1:{relay.port}/?reconnect_interval=0.2"
        setup = steering_config(
            tmp_path,
            [github_forge],
            model,
            workers=2,
            database={"url": url},
            queue={"backend": "rabbitmq", "url": relayed, "name": name},
            scheduling={"interval_seconds": 0.2},
        )

        runs = _serve_until_two_done(setup)

    assert relay.cuts == 1 and relay.connections >= 2, "the worker connected again"
    assert sorted(runs) == sorted((f"github:{REPO}#{n}", "done") for n in (first, second[0])), "one run per task"
    for number in (first, second[0]):
        assert len(_finals(github_forge, number)) == 1, number
        assert [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")] == [
            "coding agent done"
        ]


def test_the_database_lost_mid_run_ends_nothing(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """`serve` on PostgreSQL; its connections drop while a run waits on the model (a
    database restart, a failover), and no new one is accepted for a while. A producer
    cycle that cannot reach the store says so and ends (its query raised, and `serve`
    died of it); once the database is back, the pool connects again (`pool_pre_ping`):
    the run ends done once, and `serve` goes on to the next task."""
    url, _ = distributed
    first = github_forge.open_task("issue", "First task", "Please add hello.txt.")
    second: list[int] = []
    open_at_cut: list[int] = []

    def lose_the_database(_: dict[str, Any]) -> None:
        open_at_cut.append(relay.open_connections)
        relay.refusing = True
        relay.cut()
        second.append(github_forge.open_task("issue", "Second task", "Please add hello.txt too."))
        wait_for(lambda: "the state store cannot be reached" in caplog.text, 60, "a producer cycle to find the store away")
        relay.refusing = False

    replies = [{**HELLO_SCRIPT["replies"][0], "before": {"lose_the_database": {}}}, *HELLO_SCRIPT["replies"][1:]]
    script = {"conversations": [{"match": "First task", "replies": replies}], "replies": HELLO_SCRIPT["replies"]}
    parts = urlsplit(url)
    with TcpRelay(parts.hostname or "127.0.0.1", parts.port or 5432) as relay:
        relayed = urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.port}", f":{relay.port}")))
        with ReplaySandbox(script, actions={"lose_the_database": lose_the_database}) as model:
            setup = steering_config(
                tmp_path, [github_forge], model, workers=2, database={"url": relayed}, scheduling={"interval_seconds": 0.2}
            )

            runs = _serve_until_two_done(setup)

    assert open_at_cut[0] > 0 and relay.connections > open_at_cut[0], "connections were cut, and made again"
    assert sorted(runs) == sorted((f"github:{REPO}#{n}", "done") for n in (first, second[0])), "one run per task"
    for number in (first, second[0]):
        assert len(_finals(github_forge, number)) == 1, number


@pytest.mark.parametrize("losing", ["poll", "pick-up"])
def test_an_unforeseen_failure_to_offer_or_pick_up_a_task_ends_nothing(
    github_forge: GitHubForge, tmp_path: Path, losing: str
) -> None:
    """The queue's bookkeeping of the task loses two races in a row to another process
    (its entry deleted before an update, then inserted again before the insert that
    follows) and gives up with an IntegrityError, an error no handler foresees: in the
    producer's offer (`poll`) or in the worker's pick-up (`pick-up`). That poll or that
    pick-up is lost, not `serve`: the task is offered again and worked once."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    key = f"github:{REPO}#{number}"
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model, scheduling={"interval_seconds": 0.2})
        config = load_for_service(setup)
        other = StateStore(config.database.url)  # another process's bookkeeping, in a queue not ours
        others = QueueEntries(other.engine, "memory:another-process", 3600)
        if losing == "poll":  # an entry the producer's offer updates (not one of its queue's)
            others.try_enqueue(key)
        staged: list[str] = []

        def lose_the_races(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            verb = statement.lstrip().upper()
            if not staged and verb.startswith("UPDATE QUEUE_ENTRIES"):
                staged.append("deleted")
                others.release(key)
            elif staged == ["deleted"] and verb.startswith("INSERT INTO QUEUE_ENTRIES"):
                staged.append("inserted")
                others.try_enqueue(key)

        async def serve() -> list[str]:
            service = AgentService(config)
            event.listen(service.store.engine, "before_cursor_execute", lose_the_races)
            events: list[str] = []
            service.workers.on_event = lambda what, _: events.append(what)
            stop = asyncio.Event()
            serving = asyncio.create_task(service.serve(stop))
            try:
                await wait_until(lambda: "ended" in events or serving.done(), 120, "the task's run to end")
                assert not serving.done(), "serve is still serving"
            finally:
                stop.set()
                await serving
                await service.aclose()
            return events

        try:
            events = asyncio.run(asyncio.wait_for(serve(), 180))
        finally:
            other.close()

    assert staged == ["deleted", "inserted"], "both races were lost"
    assert events.count("started") == 1, events
    assert len(_finals(github_forge, number)) == 1
    assert "coding agent done" in github_forge.labels("issue", number)


async def _publish_by_hand(name: str, messages: list[dict[str, str]]) -> None:
    """Publish raw messages to the queue as anyone with access to the broker could."""
    queue = await RabbitQueue.open(amqp_url(), name, prefetch=1)  # declared as the agent declares it
    try:
        channel = await queue._connection.channel()
        for message in messages:
            await channel.default_exchange.publish(aio_pika.Message(json.dumps(message).encode()), routing_key=name)
    finally:
        await queue.aclose()


def test_a_hand_published_message_works_nothing_the_worker_would_not_pick_itself(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str]
) -> None:
    """A message is a hint like a webhook (SPEC 15): published by hand to the broker, one
    for a repository outside the configured owner, one for an in-scope issue without the
    trigger label, one for an issue labelled by a user without write access, and a
    `continue` for an issue someone labelled `processing` with no run of the agent behind
    it: the worker claims none of them (no forge request to the foreign repository at all,
    no label written, no model request), and the message published after them is worked."""
    url, name = distributed
    state = github_forge.sandbox.state
    other = "octo-other/gizmos"
    state.add_repo(other)
    state.set_permission(other, MAINTAINER, "admin")
    state.set_permission(other, BOT, "write")
    foreign = state.create_issue(other, "Foreign task", "Please add hello.txt.", author=MAINTAINER)
    state.add_label(other, foreign, "coding agent", actor=MAINTAINER)
    unlabelled = state.create_issue(REPO, "Unlabelled task", "Please add hello.txt.", author=MAINTAINER)
    untrusted = github_forge.open_task("issue", "Untrusted task", "Please add hello.txt.", labelled_by=READER)
    processing = state.create_issue(REPO, "Processing task", "Please add hello.txt.", author=MAINTAINER)
    state.add_label(REPO, processing, "coding agent processing", actor=MAINTAINER)
    legit = github_forge.open_task("issue", "Legit task", "Please add hello.txt.")
    forged = [
        {"key": f"github:{other}#{foreign}", "reason": "new"},
        {"key": f"github:{REPO}#{unlabelled}", "reason": "new"},
        {"key": f"github:{REPO}#{untrusted}", "reason": "new"},
        {"key": f"github:{REPO}#{processing}", "reason": "continue"},
    ]
    labels_before = {
        (repo, number): list(state.issue(repo, number).labels)
        for repo, number in [(other, foreign), (REPO, unlabelled), (REPO, untrusted), (REPO, processing)]
    }
    asyncio.run(_publish_by_hand(name, [*forged, {"key": f"github:{REPO}#{legit}", "reason": "new"}]))
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = distributed_config(tmp_path, github_forge, model, url, name, workers=1)
        worker = spawn_cli(setup.config_path, "worker")
        store = StateStore(url)
        try:
            wait_for(lambda: any(run.status == "done" for run in store.runs.all()) or worker.poll() is not None, 240, "a run done")
            runs = [(run.task_key, run.status) for run in store.runs.all()]
        finally:
            store.close()
            error = _stop(worker)
        asked = [" ".join(user_messages(request)) for request in model.requests]

    assert worker.returncode == 0, error
    assert runs == [(f"github:{REPO}#{legit}", "done")], runs
    assert asked and all("Legit task" in text for text in asked), "the model was asked about the legit task only"
    assert not [r for r in state.requests() if r.path.startswith(f"/repos/{other}")], "the foreign repository untouched"
    for (repo, number), before in labels_before.items():
        assert list(state.issue(repo, number).labels) == before, (repo, number)
    logged = error + "".join(path.read_text() for path in setup.logs.glob("*.log*"))
    assert f"github:{other}#{foreign}: outside the configured scope" in logged
    assert f"github:{REPO}#{processing}: no run to continue" in logged


def test_queued_tasks_whose_messages_were_taken_while_the_database_was_away_are_offered_again(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The in-process queue's workers take two queued tasks while PostgreSQL is away: they
    can record neither the pick-up nor the release, so the tasks' entries still say
    `queued` while their messages are gone. The next poll finds that (the queue knows what
    it holds) and offers both again: each is done once, not an hour later."""
    url, _ = distributed
    numbers = [github_forge.open_task("issue", f"Task {n}", "Please add hello.txt.") for n in range(2)]
    parts = urlsplit(url)
    with TcpRelay(parts.hostname or "127.0.0.1", parts.port or 5432) as relay, ReplaySandbox(HELLO_SCRIPT) as model:
        relayed = urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.port}", f":{relay.port}")))
        setup = steering_config(tmp_path, [github_forge], model, workers=2, database={"url": relayed})

        async def outage_then_poll() -> tuple[list[str], list[str], list[str]]:
            service = AgentService(load_for_service(setup))
            try:
                queue = await service.queue()
                offered = [item.key for item in (await service.producer.cycle(queue)).enqueued]
                relay.refusing = True
                relay.cut()
                produced = asyncio.Event()
                produced.set()
                lost = await service.workers.run(queue, produced=produced)  # the queue drained, nothing recorded
                relay.refusing = False
                again = await service.run_cycle()
                return offered, [str(outcome) for outcome in lost], [result.status for result in again.results]
            finally:
                await service.aclose()

        with caplog.at_level("INFO"):
            offered, lost, statuses = asyncio.run(asyncio.wait_for(outage_then_poll(), 240))

    assert sorted(offered) == sorted(f"github:{REPO}#{n}" for n in numbers)
    assert len(lost) == 2 and all("the state store cannot be reached" in outcome for outcome in lost), lost
    assert "2 queued task(s) had no message left" in caplog.text
    assert statuses == ["done", "done"]
    for number in numbers:
        assert len(_finals(github_forge, number)) == 1, number


class SlowToPublish(MemoryQueue):
    """The in-process queue behind a publish that takes a while (a broker slow to
    confirm): `put` waits for `gate`."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.putting = asyncio.Event()

    async def put(self, item: QueuedTask, delay: float = 0.0) -> None:
        self.putting.set()
        await self.gate.wait()
        await super().put(item, delay)


def test_a_task_offered_while_a_poll_asks_the_queue_what_it_holds_keeps_its_entry(
    github_forge: GitHubForge, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A webhook's offer records the task `queued`, then publishes its message. A poll
    that asks the queue what it holds in between (the message not out yet) must not take
    that entry for a lost message: it released it with a warning, and the next offer
    queued the task a second time."""
    key = f"github:{REPO}#7"
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model)

        async def offer_during_a_poll() -> tuple[bool, dict[str, str]]:
            service = AgentService(load_for_service(setup))
            try:
                queue = SlowToPublish()
                offering = asyncio.create_task(service.producer.offer(queue, key, "new"))
                await asyncio.wait_for(queue.putting.wait(), 30)
                await service.producer.cycle(queue)
                queue.gate.set()
                return await offering, service.entries.states()
            finally:
                await service.aclose()

        with caplog.at_level("INFO"):
            offered, states = asyncio.run(asyncio.wait_for(offer_during_a_poll(), 120))
    assert offered and states == {key: "queued"}
    assert "had no message left" not in caplog.text
