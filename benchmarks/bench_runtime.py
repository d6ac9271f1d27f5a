"""Concurrency of the runtime (SPEC 13): N tasks at once vs one, the event loop's lag
while they run, and how soon a task labelled while another runs is picked up.

1. `run --once` (`AgentService.run_cycle`, memory queue) on 1 and on N issues of the
   sandbox GitHub, `workers: N`, against the replay model with a fixed latency per reply
   (5 replies: 4 tool calls, then done). Target: N=16 under 1.15x the time of one.
   The same through `serve` (`"serve"`): from its start until every run has ended.
2. Event-loop lag while the N tasks run: a sampler sleeps 10 ms again and again and
   records how late it wakes. Target: p99 under 50 ms.
3. Pickup while busy: `serve` with two slots and a poll interval; a long task runs, a
   second is labelled; the time from the label to the second task's first model
   request. Target: under one poll interval + 1 s. And the same with the label's
   webhook (`issues` labeled, signed, POSTed to `/webhooks/github` of `serve`, polling
   an hour apart): from the delivery to the first model request. Target: under 1 s.
4. A restarted `serve`: N tasks waiting as it starts, in a fresh process (spawned), whose
   first runs import the model's SDK and the MCP SDK; its time against the warmed-up
   `serve` measure, and its event loop's lag (the imports run in a worker thread,
   `agent/run_libraries.py`).
5. CPU-seconds per task until every task's first model request (this process, its
   live descendants and its reaped children, the servers' process left out; less
   sensitive to other load than wall time): what a task pays before it starts working.
   Budget: about 0.1 CPU-s.

The forge and the model run in a child process (`_common.ServerProcess`), as a remote
forge and model would: in this process their threads (and the forge's `git
http-backend` children) would compete with the agent for the GIL and the CPU count, and
show up as the agent's event-loop lag. `--servers-in-process` keeps them in threads here.

Run: `python benchmarks/bench_runtime.py [--tasks 16] [--latency 1.0] [--rounds 1] [--no-mirror] [--servers-in-process] [--timeline] [--postgres]`
(`--no-mirror`: `workspace.mirror: false`, every run cloning from the forge; `--timeline`:
where the one- and N-task cycles' wall time went, from the servers' receive times;
`--postgres`: the state store in a fresh PostgreSQL database per service, dropped after,
instead of SQLite: PostgreSQL at 127.0.0.1:5432 or `CODING_AGENT_TEST_POSTGRES`)
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
from collections import Counter
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from _common import ServerProcess, emit, percentile, proc_stat_fields

from coding_agent.config import AgentConfig, parse_config
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.web.server import bind_socket, serving_http
from tests.support.github_webhooks import GitHubWebhooks
from tests.support.services import fresh_postgres_database

REPO = "bench/runtime"
BOT = "bench-bot"
TOKEN = "ghp_" + "BenchRuntimeToken0123456789abcdef"
MIRROR = True
WEBHOOK_SECRET = "whsec-" + "bench0123456789abcdef"
SERVERS_IN_PROCESS = False
TIMELINE = False
POSTGRES = False
TIMELINES: dict[int | str, dict[str, Any]] = {}


def _script(latency: float) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"tool": "workspace/create", "args": {"path": f"f{n}.txt", "content": f"{n}\n"}, "comment": f"f{n}"} for n in range(4)
    ]
    return {"latency_seconds": latency, "replies": [*steps, {"done": "Wrote the files."}]}


def _sandbox() -> GitHubSandbox:
    sandbox = GitHubSandbox().start()
    state = sandbox.state
    state.add_user("maintainer")
    state.add_user(BOT, token=TOKEN, bot=True)
    state.add_repo(REPO)
    state.set_permission(REPO, "maintainer", "admin")
    state.set_permission(REPO, BOT, "write")
    return sandbox


def serve_forge_and_model(conn: Connection) -> None:
    """The sandbox GitHub and the replay model, answering the benchmark's messages:

    `("load", script)` a new script and a clean request log; `("open", title, count)`
    labelled issues; `("conversations", n)` answers once the model has seen `n` (polled
    here, so the measured process only waits); `("stop",)` ends.
    """
    sandbox = _sandbox()
    try:
        with ReplaySandbox({"replies": []}) as model:
            conn.send({"forge_url": sandbox.url, "model_url": model.openai_base_url})
            while (message := conn.recv())[0] != "stop":
                if message[0] == "load":
                    model.model.load(message[1])
                    conn.send(None)
                elif message[0] == "open":
                    for n in range(message[2]):
                        number = sandbox.state.create_issue(REPO, f"{message[1]} {n}", "Write the files.", author="maintainer")
                        sandbox.state.add_label(REPO, number, "coding agent", actor="maintainer")
                    conn.send(None)
                elif message[0] == "open_by_webhook":  # (url, secret): labelled, then delivered
                    number = sandbox.state.create_issue(REPO, "By webhook", "Write the files.", author="maintainer")
                    sandbox.state.add_label(REPO, number, "coding agent", actor="maintainer")
                    hooks = GitHubWebhooks(sandbox.state, sandbox.url)
                    body = hooks.body(hooks.issues(REPO, number, "labeled", "maintainer", label="coding agent"))
                    headers = hooks.headers("issues", body, message[2])
                    conn.send(httpx.post(f"{message[1]}/webhooks/github", content=body, headers=headers).status_code)
                elif message[0] == "timeline":  # receive times of the model's and the forge's requests
                    conn.send(
                        {
                            "model": [(r.conversation, r.received_at) for r in model.model.requests],
                            "forge": [(r.method, r.path, r.answered_at) for r in sandbox.state.requests()],
                            "git": [(r.method, r.service) for r in sandbox.state.git.requests],
                        }
                    )
                else:
                    while len({r.conversation for r in model.requests}) < message[1]:
                        time.sleep(0.005)
                    conn.send(None)
    finally:
        sandbox.stop()


@contextmanager
def _database(directory: Path) -> Iterator[str]:
    """The state store's URL: SQLite in `directory`, or (`--postgres`) a fresh PostgreSQL
    database, dropped afterwards."""
    if not POSTGRES:
        yield f"sqlite:///{directory / 'state.db'}"
        return
    with fresh_postgres_database() as url:
        yield url


def _config(directory: Path, urls: dict[str, str], database: str, **extra: Any) -> AgentConfig:
    data: dict[str, Any] = {
        "task_source": ["github"],
        "github": {"api_url": urls["forge_url"], "token": TOKEN, "owner": "bench", "bot_name": BOT},
        "llm": {"provider": "openai", "openai": {"model": "replay", "base_url": urls["model_url"], "api_key": "k"}},
        "workspace": {"base_dir": str(directory / "workspaces"), "mirror": MIRROR},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "database": {"url": database},
        "logging": {"dir": str(directory / "logs")},
        "memory": {"enabled": False},
        "progress_comment": {"enabled": False},
        "retry": {"base_delay_seconds": 0.01},
        "dashboard": {"enabled": False},
        **extra,
    }
    return parse_config(data, env={})


async def _lag_sampler(samples: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(0.01)
        samples.append(loop.time() - before - 0.01)


def _tree_cpu_seconds(leave_out: int | None) -> float:
    """CPU time of this process, its live descendants and the children it reaped, but
    for the process `leave_out` (the servers') and its descendants. (A servers' process
    is reaped only after its measurement; an earlier one's CPU, in this process's
    reaped-children time, is the same at the start and at the end of a measurement.)"""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := proc_stat_fields(entry.name)) is not None:
            stats[int(entry.name)] = fields
    me = os.getpid()
    tree, changed = {me}, True
    while changed:
        found = {pid for pid, fields in stats.items() if int(fields[1]) in tree and pid != leave_out} - tree
        tree |= found
        changed = bool(found)
    total = 0
    for pid in tree & set(stats):
        fields = stats[pid]
        total += sum(int(value) for value in fields[11:15]) if pid == me else int(fields[11]) + int(fields[12])
    return total / tick


async def _first_requests_cpu(servers: ServerProcess, tasks: int, started_cpu: float) -> float:
    """CPU-seconds per task spent until every task has sent its first model request."""
    await servers.ask_async("conversations", tasks)
    return (_tree_cpu_seconds(servers.pid) - started_cpu) / tasks


_FOLDED = re.compile(r"/(\d+|agent/[^/]+|coding-agent/[^/]+)")


def _timeline(recorded: dict[str, Any], started: float, ended: float, latency: float) -> dict[str, Any]:
    """Where a cycle's wall time went, from the servers' receive times (one monotonic
    clock for both processes): each task's first model request after the start; the
    agent's time between a reply and its next request, by step; the end after the last
    reply; the forge's API requests by kind (numbers and branch names folded) and its git
    requests by service."""
    by_task: dict[str, list[float]] = {}
    for conversation, at in recorded["model"]:
        by_task.setdefault(conversation, []).append(at)
    firsts = sorted(times[0] - started for times in by_task.values())
    steps: dict[int, list[float]] = {}
    for times in by_task.values():
        for index, (before, after) in enumerate(zip(times, times[1:]), start=1):
            steps.setdefault(index, []).append(after - before - latency)
    kinds: dict[str, int] = {}
    for method, path, _ in recorded["forge"]:
        kind = method + " " + _FOLDED.sub("/N", path)
        kinds[kind] = kinds.get(kind, 0) + 1
    last_reply = max(times[-1] for times in by_task.values()) + latency
    ms = lambda seconds: round(seconds * 1000)  # noqa: E731
    return {
        "first_request_ms": {"min": ms(firsts[0]), "median": ms(percentile(firsts, 0.5)), "max": ms(firsts[-1])},
        "host_ms_after_reply_by_step": {
            index: {"median": ms(percentile(sorted(gaps), 0.5)), "max": ms(max(gaps))} for index, gaps in steps.items()
        },
        "end_after_last_reply_ms": ms(ended - last_reply),
        "forge_requests": dict(sorted(kinds.items(), key=lambda item: -item[1])),
        "git_requests": {f"{m} {service}": n for (m, service), n in Counter(map(tuple, recorded["git"])).items()},
    }


async def _once(servers: ServerProcess, tasks: int, latency: float) -> tuple[float, list[float], float, float]:
    """`tasks` labelled issues worked at once by one `run --once` cycle with as many slots:
    wall seconds, the loop's lag samples, CPU-s per task before the first model requests,
    and the agent's CPU-s for the whole cycle."""
    await servers.ask_async("load", _script(latency))
    await servers.ask_async("open", "Task", tasks)
    with tempfile.TemporaryDirectory() as scratch, _database(Path(scratch)) as database:
        service = AgentService(_config(Path(scratch), servers.urls, database, workers=tasks))
        samples: list[float] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(_lag_sampler(samples, stop))
        first = asyncio.create_task(_first_requests_cpu(servers, tasks, _tree_cpu_seconds(servers.pid)))
        started, started_cpu = time.monotonic(), _tree_cpu_seconds(servers.pid)
        report = await service.run_cycle()
        ended = time.monotonic()
        elapsed, cycle_cpu = ended - started, _tree_cpu_seconds(servers.pid) - started_cpu
        stop.set()
        await sampler
        await service.aclose()
    assert [r.status for r in report.results] == ["done"] * tasks, report
    if TIMELINE:
        TIMELINES[tasks] = _timeline(await servers.ask_async("timeline"), started, ended, latency)
    return elapsed, samples, await first, cycle_cpu


async def _served(servers: ServerProcess, tasks: int, latency: float) -> float:
    """`tasks` labelled issues worked by `serve` with as many slots: seconds from its start
    until every run has ended (the first poll finds them all)."""
    await servers.ask_async("load", _script(latency))
    await servers.ask_async("open", "Served", tasks)
    started, ended_at, _ = await _serve_until_ended(servers.urls, tasks)
    if TIMELINE:
        TIMELINES[f"serve {tasks}"] = _timeline(await servers.ask_async("timeline"), started, ended_at, latency)
    return ended_at - started


async def _serve_until_ended(urls: dict[str, str], tasks: int) -> tuple[float, float, list[float]]:
    """`serve` with `tasks` slots from its start until `tasks` runs have ended: its start
    and end (`time.monotonic()`), and the event loop's lag samples meanwhile."""
    with tempfile.TemporaryDirectory() as scratch, _database(Path(scratch)) as database:
        service = AgentService(_config(Path(scratch), urls, database, workers=tasks))
        ended = asyncio.Event()
        count = [0]

        def on_event(event: str, key: str) -> None:
            count[0] += event == "ended"
            if count[0] == tasks:
                ended.set()

        service.workers.on_event = on_event
        stop, sampled = asyncio.Event(), asyncio.Event()
        samples: list[float] = []
        sampler = asyncio.create_task(_lag_sampler(samples, sampled))
        started = time.monotonic()
        serving = asyncio.create_task(service.serve(stop))
        await ended.wait()
        ended_at = time.monotonic()
        sampled.set()
        stop.set()
        await asyncio.gather(serving, sampler)
        done = await asyncio.to_thread(service.store.runs.runs_with_status, "done")
        await service.aclose()
    assert len(done) == tasks, f"{len(done)} of {tasks} runs done"
    return started, ended_at, samples


def serve_in_a_fresh_process(conn: Connection) -> None:
    """In a spawned interpreter, which has imported neither the model's SDK nor the MCP
    SDK (a `serve` just restarted): `_serve_until_ended` for `(urls, tasks, options)`
    received (`options`: this module's settings in the parent, from its command line)."""
    urls, tasks, options = conn.recv()
    globals().update(options)
    conn.send(asyncio.run(_serve_until_ended(urls, tasks)))


async def _restarted(servers: ServerProcess, tasks: int, latency: float) -> tuple[float, list[float]]:
    """`tasks` labelled issues worked by a `serve` in a fresh process (a restart with a
    backlog): seconds until every run has ended, and its event loop's lag samples. What
    the warmed-up `serve` measure does not pay: the first runs' imports."""
    await servers.ask_async("load", _script(latency))
    await servers.ask_async("open", "Restarted", tasks)
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=serve_in_a_fresh_process, args=(child,), daemon=True)
    process.start()
    child.close()  # the child's end, here: a child that dies then reads as EOF, not a hang
    try:
        options = {"MIRROR": MIRROR, "POSTGRES": POSTGRES}
        parent.send((servers.urls, tasks, options))
        started, ended_at, samples = await asyncio.to_thread(parent.recv)
    finally:
        process.join(timeout=60)
    return ended_at - started, samples


async def _pickup(servers: ServerProcess, latency: float, interval: float, by_webhook: bool = False) -> float:
    """`serve` with two slots: a long task runs; a second is labelled; until its first
    model request. `by_webhook`: with webhooks on and polling an hour apart, the label's
    webhook is delivered (by the forge's process) and timed from the delivery."""
    await servers.ask_async("load", _script(latency))
    await servers.ask_async("open", "Long", 1)
    hooks = {"webhooks": {"github_secret": WEBHOOK_SECRET}} if by_webhook else {}
    with tempfile.TemporaryDirectory() as scratch, _database(Path(scratch)) as database:
        scheduling = {"interval_seconds": 3600 if by_webhook else interval}
        config = _config(Path(scratch), servers.urls, database, workers=2, scheduling=scheduling, **hooks)
        service = AgentService(config)
        stop = asyncio.Event()
        async with serving_http(config, service, bind_socket("127.0.0.1", 0)) as url:
            serving = asyncio.create_task(service.serve(stop))
            await servers.ask_async("conversations", 1)  # the first poll found the long one
            started = time.perf_counter()
            if by_webhook:
                status = await servers.ask_async("open_by_webhook", url, WEBHOOK_SECRET)
                if status != 202:
                    raise SystemExit(f"the webhook was answered {status}")
            else:
                await servers.ask_async("open", "Second", 1)
            await servers.ask_async("conversations", 2)
            picked = time.perf_counter() - started
            stop.set()
            await serving
        await service.aclose()
    return picked


def _process_cpu_seconds(pid: int | None) -> float:
    """CPU time of process `pid` and its reaped children (0 without one)."""
    fields = proc_stat_fields(pid) if pid is not None else None
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK") if fields else 0.0


async def _round(tasks: int, latency: float) -> dict[str, Any]:
    """One measurement of each: 1 and `tasks` tasks by `run --once`, then by `serve`,
    each on a fresh forge and model (issues and conversations start empty)."""
    with ServerProcess(serve_forge_and_model, SERVERS_IN_PROCESS) as servers:
        one, _, one_cpu, one_cycle_cpu = await _once(servers, 1, latency)
    with ServerProcess(serve_forge_and_model, SERVERS_IN_PROCESS) as servers:
        servers_cpu = _process_cpu_seconds(servers.pid)
        many, lag, many_cpu, many_cycle_cpu = await _once(servers, tasks, latency)
        servers_cpu = _process_cpu_seconds(servers.pid) - servers_cpu
    with ServerProcess(serve_forge_and_model, SERVERS_IN_PROCESS) as servers:
        served_one = await _served(servers, 1, latency)
    with ServerProcess(serve_forge_and_model, SERVERS_IN_PROCESS) as servers:
        served_many = await _served(servers, tasks, latency)
    return {
        "one": one,
        "many": many,
        "ratio": many / one,
        "served_one": served_one,
        "served_many": served_many,
        "served_ratio": served_many / served_one,
        "lag": lag,
        "one_cpu": one_cpu,
        "many_cpu": many_cpu,
        "one_cycle_cpu": one_cycle_cpu,
        "many_cycle_cpu": many_cycle_cpu / tasks,
        "servers_cpu": servers_cpu if servers.pid else None,
        "timelines": dict(TIMELINES),  # this round's (`--timeline`)
    }


def _median_round(rounds: list[dict[str, Any]], ratio: str) -> dict[str, Any]:
    """The round whose `ratio` is the median (the lower one of an even count)."""
    ordered = sorted(rounds, key=lambda measured: measured[ratio])
    return ordered[(len(ordered) - 1) // 2]


def _median_timelines(once: dict[str, Any], served: dict[str, Any]) -> dict[str, Any]:
    """The `run --once` timelines of the round with the median `run --once` ratio, and the
    `serve` ones (keys "serve N") of the round with the median `serve` ratio."""
    return {
        **{str(key): value for key, value in once["timelines"].items() if not str(key).startswith("serve")},
        **{key: value for key, value in served["timelines"].items() if str(key).startswith("serve")},
    }


async def main(tasks: int, latency: float, interval: float, rounds: int) -> dict[str, Any]:
    # A task first that is not counted: this process's first run imports what runs need
    # (the model client, the MCP server, ...), which would make the one-task time look
    # slower and the ratio better than they are.
    with ServerProcess(serve_forge_and_model, SERVERS_IN_PROCESS) as servers:
        await _once(servers, 1, 0.0)
    # Rounds alternate one and `tasks` tasks, so that a shared machine's slow minute
    # weighs on both sides of a ratio; the median round is reported.
    measured = [await _round(tasks, latency) for _ in range(rounds)]
    once, served = _median_round(measured, "ratio"), _median_round(measured, "served_ratio")
    with ServerProcess(serve_forge_and_model, SERVERS_IN_PROCESS) as servers:
        pickup = await _pickup(servers, latency * 4, interval)
    with ServerProcess(serve_forge_and_model, SERVERS_IN_PROCESS) as servers:
        webhook_pickup = await _pickup(servers, latency * 4, interval, by_webhook=True)
    with ServerProcess(serve_forge_and_model, SERVERS_IN_PROCESS) as servers:
        restarted, restarted_lag = await _restarted(servers, tasks, latency)
    lag = [sample for measurement in measured for sample in measurement["lag"]]
    return {
        "benchmark": "runtime",
        "reply_latency_s": latency,
        "workspace_mirror": MIRROR,
        "servers": "in this process" if SERVERS_IN_PROCESS else "a child process",
        "state_store": "postgresql" if POSTGRES else "sqlite",
        "rounds": rounds,
        "one_task_s": round(once["one"], 3),
        f"{tasks}_tasks_s": round(once["many"], 3),
        "ratio": round(once["ratio"], 3),
        **({"ratios": [round(m["ratio"], 3) for m in measured]} if rounds > 1 else {}),
        "ratio_target": 1.15,
        "serve": {
            "one_task_s": round(served["served_one"], 3),
            f"{tasks}_tasks_s": round(served["served_many"], 3),
            "ratio": round(served["served_ratio"], 3),
            **({"ratios": [round(m["served_ratio"], 3) for m in measured]} if rounds > 1 else {}),
        },
        "event_loop_lag_ms": {
            "p50": round(percentile(lag, 0.5) * 1000, 2),
            "p99": round(percentile(lag, 0.99) * 1000, 2),
            "max": round(max(lag) * 1000, 2),
            "target_p99": 50,
        },
        # `serve` restarted with N tasks waiting: its first runs import the SDKs meanwhile.
        "restarted_serve": {
            f"{tasks}_tasks_s": round(restarted, 3),
            "vs_warm_serve": round(restarted / served["served_many"], 3),
            "event_loop_lag_ms": {
                "p99": round(percentile(restarted_lag, 0.99) * 1000, 2),
                "max": round(max(restarted_lag) * 1000, 2),
            },
        },
        "pickup_while_busy_s": round(pickup, 3),
        "pickup_target_s": interval + 1,
        "webhook_pickup_while_busy_s": round(webhook_pickup, 3),
        "webhook_pickup_target_s": 1.0,
        "cpu_s_per_task_before_first_request": {"one_task": round(once["one_cpu"], 3), f"{tasks}_tasks": round(once["many_cpu"], 3)},
        "agent_cpu_s_per_task": {"one_task": round(once["one_cycle_cpu"], 3), f"{tasks}_tasks": round(once["many_cycle_cpu"], 3)},
        # On this machine the forge (API, git http-backend) and the model share the
        # agent's cores; in real use they are remote. What they took during the N tasks:
        f"servers_cpu_s_during_{tasks}_tasks": round(once["servers_cpu"], 3) if once["servers_cpu"] is not None else None,
        **({"timeline_by_tasks": _median_timelines(once, served)} if TIMELINE else {}),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--no-mirror", action="store_true", help="workspace.mirror: false")
    parser.add_argument("--servers-in-process", action="store_true", help="the forge and the model in threads here")
    parser.add_argument("--timeline", action="store_true", help="where the 1- and N-task cycles' time went")
    parser.add_argument("--postgres", action="store_true", help="the state store in PostgreSQL, not SQLite")
    parser.add_argument("--rounds", type=int, default=1, help="measure 1 vs N this many times; report the median round")
    options = parser.parse_args()
    TIMELINE = options.timeline
    POSTGRES = options.postgres
    MIRROR = not options.no_mirror
    SERVERS_IN_PROCESS = options.servers_in_process
    emit(asyncio.run(main(options.tasks, options.latency, options.interval, max(1, options.rounds))))
