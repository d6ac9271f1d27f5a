"""One run of one claimed task, from the first prompt to the final label.

Sets up what the loop needs (context files, workspace, MCP servers, the model), runs
the loop, and publishes the outcome: the final comment and the done or failed label.
Whatever goes wrong, the run ends with consistent labels, one comment saying what
happened (never a stack trace or a secret), and its context moved to `completed/`.

Its parts live beside it: `reporter.py` (the run's comments), `trust.py` (whose words
are trusted), `ledger.py` (the run's progress writes and its lease, bound to the run as
it starts: the loop is handed its parts, never the task), `run_setup.py` (planning's
policy, the first turn), `publishing.py` (the final comment and label). What stays here
is the run's order of events, `run` and `_work`, read best in one place (hence a little
over 300 lines).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from coding_agent.agent.environment import RunEnvironment
from coding_agent.agent.ledger import LeaseGuard, RunLedger
from coding_agent.agent.loop import LoopLimits, LoopOutcome, LoopStart, Oversight, run_loop
from coding_agent.agent.loop_policy import LoopPolicy, ProtocolPolicy
from coding_agent.agent.planning import render_instructions
from coding_agent.agent.publishing import give_up, publish_outcome
from coding_agent.agent.reply_thread import request_thread
from coding_agent.agent.reporter import IssueReporter
from coding_agent.agent.run_libraries import RunLibraries
from coding_agent.agent.run_setup import first_turn_for, planner_for
from coding_agent.agent.steering import Continuation, LeaseLost, RunControl, RunControls, RunInterrupted
from coding_agent.agent.trust import TrustCache
from coding_agent.config import AgentConfig
from coding_agent.context.compression import Compressor, model_summarizer
from coding_agent.context.memory import MemoryKeeper
from coding_agent.context.storage import ContextStorage, RunContextFiles
from coding_agent.domain.lease import LeaseWatch
from coding_agent.domain.ports import RunStore, Workspaces
from coding_agent.domain.tasks import Comment, Task, Thread, ThreadRef
from coding_agent.errors import AgentError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.factory import create_llm_client
from coding_agent.llm.protocols import create_protocol
from coding_agent.prompts.notices import notice
from coding_agent.prompts.prompting import render_system_prompt
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source
from coding_agent.sources.factory import retry_policy

__all__ = ["TaskRunner", "RunResult", "IssueReporter"]

log = logging.getLogger(__name__)

# Publications of an outcome (final comment, label) before the run gives up and ends failed.
MAX_PUBLISH_ATTEMPTS = 3


@dataclass(frozen=True)
class RunResult:
    run_uuid: str
    task_key: str
    status: str
    steps: int
    context_dir: Path


class TaskRunner:
    """Works claimed tasks. One instance serves every task of a worker process."""

    def __init__(
        self,
        config: AgentConfig,
        store: RunStore,
        redactor: Redactor,
        owner: str,
        llm_factory: Callable[[], LLMClient] | None = None,
        controls: RunControls | None = None,
        memories: MemoryKeeper | None = None,
        *,
        workspaces: Workspaces,
    ) -> None:
        """`memories`: the worker's memory keeper (None: memories are off); the worker owns
        the database, the runner only reads and writes through the keeper. `workspaces`:
        where the runs' clones live (the worker's); the runner opens each run's through it."""
        self._config = config
        self._store = store
        self._redactor = redactor
        self._owner = owner
        self._storage = ContextStorage(config.context_storage.base_dir, redactor)
        self._controls = controls or RunControls(config, store, redactor, owner)
        self._llm_factory = llm_factory or (lambda: create_llm_client(config.llm, retry_policy(config)))
        self._memories = memories
        self._workspaces = workspaces
        # The model's SDK and the MCP SDK, loaded off the event loop (`run_libraries.py`).
        self.libraries = RunLibraries(config.llm)

    async def run(
        self,
        source: Source,
        task: Task,
        requester: str | None,
        continuation: Continuation | None = None,
        lease: LeaseWatch | None = None,
        reply_to: ThreadRef | None = None,
        ready: Callable[[], None] = lambda: None,
        picked_at: float | None = None,
        *,
        writers: frozenset[str] = frozenset(),
    ) -> RunResult:
        """Work `task` (already claimed by this worker) to its end; release its lease.

        `continuation`: an existing run to carry on (resumed after a pause, or taken over
        after its worker died) instead of starting a new one. `lease`: the worker's
        heartbeat; once it is lost the run stops at its next step, writing nothing more.
        `reply_to`: the review thread that asked for this run (kept in the run's metadata,
        so a continued run answers there too). `ready`: called once the run's clone is
        ready, before its setup and tools start (the worker's start slot is given back).
        `picked_at`: when the worker took the task (`time.monotonic()`); its clone holds
        every push made before then. `writers`: who the claim of this run found to have
        write access moments ago (`Claim.writers`); the run's trust starts from them.
        """
        config = self._config
        key = str(task.key)
        reopened = continuation.reopen(self._storage) if continuation is not None else None
        if reopened is not None:
            files, workspace = reopened
            run_uuid = files.run_uuid
        else:
            continuation = None
            run_uuid = str(uuid.uuid4())
            workspace = self._workspaces.directory(run_uuid)
            files = self._storage.start_run(
                run_uuid,
                task_key=key,
                requester=requester,
                provider=config.llm.provider,
                model=config.llm.active.model,
                protocol="tool_calls" if config.llm.function_calling else "json_text",
            )
        ledger = RunLedger(self._store, self._owner, key, run_uuid, lease, config.scheduling.lease_seconds)
        if reopened is None:
            await ledger.stored(self._store.start_run, run_uuid, key, self._owner, requester)
            if reply_to is not None:
                files.write_metadata(reply_to=str(reply_to))
        await asyncio.to_thread(self._store.note_task, key, task.title, task.url)
        saved_thread = files.metadata.get("reply_to")
        reply_to = ThreadRef.parse(saved_thread) if saved_thread else None
        reporter = IssueReporter(source, task.key, self._redactor)
        if reply_to is not None:
            reporter.answer_in(reply_to)
        elif task.key.is_change:  # which thread asked is read with the conversation, or on an early end
            reporter.find_thread_with(lambda: self._request_thread(source, task, writers))
        control = RunControl(
            self._controls, source, task, files, workspace, requester, reporter, continuation, ledger.stored
        )
        log.info("%s: run %s %s", key, run_uuid, "continued" if continuation is not None else "started")
        outcome = LoopOutcome("failed", "", control.steps)
        llm: LLMClient | None = None
        interruption: RunInterrupted | None = None
        async with ledger:  # on leaving: the last progress write awaited, the usage written
            try:
                await self.libraries.loaded()
                llm = self._llm_factory()
                llm.on_usage(ledger.record_usage)
                recorded = control.recorded_outcome()
                if recorded is not None:
                    ready()
                outcome = recorded or await self._work(
                    source,
                    task,
                    llm,
                    files,
                    reporter,
                    workspace,
                    requester,
                    control,
                    ledger,
                    ready,
                    picked_at,
                    reply_to,
                    writers,
                )
                ledger.check_lease()  # the task is another worker's now: publish nothing
                if self._memories is not None and recorded is None:
                    await self._memories.after_run(llm, task.key, run_uuid, outcome.status, outcome.comment)
            except RunInterrupted as error:  # pause, stop, lease lost: steering's endings (SPEC 8)
                interruption = error
            except AgentError as error:
                message = self._redactor.text(str(error))
                log.error("%s: run %s failed: %s", key, run_uuid, message)
                outcome = LoopOutcome("failed", notice("error", config.language, message=message), outcome.steps)
            except Exception:
                log.exception("%s: run %s failed with an internal error", key, run_uuid)
                outcome = LoopOutcome(
                    "failed", notice("error", config.language, message="internal error (see the agent's log)"), 0
                )
            finally:
                if llm is not None:
                    files.sync_messages(llm.messages)
                    await llm.aclose()
        try:
            if interruption is not None:
                status, context_dir = await control.interrupted(interruption, llm)
                if status == "stopped":
                    await self._discard_clone(workspace)
                return RunResult(run_uuid, key, status, control.steps, context_dir)
            return await self._publish(source, task, control, ledger, files, workspace, outcome)
        except LeaseLost as lost:  # the store came back after an outage longer than the lease
            status, context_dir = await control.interrupted(lost, llm)
            return RunResult(run_uuid, key, status, control.steps, context_dir)

    async def _publish(
        self,
        source: Source,
        task: Task,
        control: RunControl,
        ledger: RunLedger,
        files: RunContextFiles,
        workspace: Path,
        outcome: LoopOutcome,
    ) -> RunResult:
        """Record the outcome, then publish it (final comment, label) and end the run."""
        config = self._config
        key, run_uuid = str(task.key), files.run_uuid
        # Redacted before anything stores it: the state store keeps the outcome to publish
        # (run_marks.final_body) and a failed run's reason (runs.error).
        outcome = replace(outcome, comment=self._redactor.text(outcome.comment))
        await control.record_outcome(outcome)
        status, failure = await publish_outcome(
            source, task, control.reporter(), outcome, config.language, self._redactor
        )
        if status is None:
            attempts = int(files.metadata.get("publish_attempts", 0)) + 1
            if attempts < MAX_PUBLISH_ATTEMPTS:
                return await self._leave_finishing(key, ledger, files, outcome.steps, attempts)
            status = await give_up(source, task, attempts, failure, config.language, self._redactor)
        await control.finished(status)
        files.write_metadata(status=status, steps=outcome.steps)
        context_dir = files.move_to("completed")
        error = None if status == "done" else outcome.comment
        await ledger.stored(self._store.finish_run, run_uuid, status, outcome.steps, error)
        await ledger.stored(self._store.release_lease, key, self._owner)
        log.info("%s: run %s ended %s after %d steps", key, run_uuid, status, outcome.steps)
        await self._discard_clone(workspace)
        return RunResult(run_uuid, key, status, outcome.steps, context_dir)

    async def _discard_clone(self, workspace: Path) -> None:
        """Delete an ended run's clone (the port honours `workspace.keep_finished`). A
        paused run's is kept, and so is an abandoned one's: another worker may be continuing it."""
        await asyncio.to_thread(self._workspaces.discard, workspace)

    async def _work(
        self,
        source: Source,
        task: Task,
        llm: LLMClient,
        files: RunContextFiles,
        reporter: IssueReporter,
        workspace: Path,
        requester: str | None,
        control: RunControl,
        ledger: RunLedger,
        ready: Callable[[], None],
        picked_at: float | None,
        reply_to: ThreadRef | None = None,
        writers: frozenset[str] = frozenset(),
    ) -> LoopOutcome:
        config = self._config
        record = files.directory / "checkout.json"
        clone = self._workspaces.open(source, task, workspace, record, control.paused_work(), picked_at)
        await clone.prepare()
        ready()
        control.save_work = lambda: clone.pause(files.run_uuid, control.steps)  # SPEC 8.3: a WIP commit
        protocol = create_protocol(config.llm.function_calling)
        planner = planner_for(config, protocol, workspace, control, self._redactor)
        policy: LoopPolicy = planner or ProtocolPolicy(protocol)
        instructions = protocol.instructions()
        if planner is not None:
            instructions += "\n\n" + render_instructions(protocol.uses_native_tools, config.planning.max_actions)
        # The MCP SDK only once a run starts (`run --once` from cron mostly finds nothing),
        # and imported already, in a worker thread, by `self.libraries.loaded()`.
        from coding_agent.tools.hub import ToolHub

        # SPEC 7.1: the egress proxy and the setup, before the servers and the first request.
        async with RunEnvironment(config, source, task, workspace, self._redactor, writers) as environment, ToolHub(
            environment.servers(config.mcp_servers), config.tools, workspace, self._redactor.secrets
        ) as hub:
            # The conversation is read here, right before the first prompt is built from it:
            # the prompt holds the comments as they are when the model is first asked, and
            # the loop's first checkpoint, a moment later, does not list them again.
            comments, threads, trust = await self._conversation(source, task, reporter, reply_to, writers)
            # Rule files are rules only when the trigger controls them: not on a PR head
            # written by someone without write access (SPEC 15); then they are untrusted context.
            rules = clone.rules()
            branch_rules = rules if task.key.is_change and not trust(task.author) else {}
            llm.send_system_prompt(
                render_system_prompt(
                    task,
                    hub.tool_specs,
                    hub.system_prompts,
                    instructions,
                    show_schemas=not protocol.uses_native_tools,
                    language=config.language,
                    repository_rules={} if branch_rules else rules,
                    untrusted=trust.wrapper,
                )
            )
            if not control.restore(llm):  # a continued run has its history already
                previous = await ledger.stored(self._store.runs, str(task.key))
                first_turn = await ledger.stored(  # it reads the memories from the state store
                    first_turn_for,
                    config, self._memories, source, task, comments, threads, trust, files.run_uuid, branch_rules, previous,
                )
                llm.send_user_message("\n\n".join(part for part in (first_turn, environment.first_turn_note()) if part))
            policy.prepare(llm, hub.tool_specs)
            await control.begin(comments, threads, trust)
            if (setup_note := environment.progress_note()) is not None:
                await control.reporter().step_comment(setup_note)
            limits = LoopLimits(
                max_steps=config.max_llm_process_num,
                max_tokens=config.budget.max_tokens,
                max_seconds=config.budget.max_seconds,
                language=config.language,
            )
            oversight = Oversight(
                steering=LeaseGuard(control, ledger),
                guard=control.loop_guard,
                compressor=self._compressor(ledger),
                on_step=lambda steps: (ledger.step(steps), control.on_step(steps)),
            )
            start = LoopStart(control.steps, control.pending_reply(llm))
            tools = environment.tools(control.tools(hub))
            outcome = await run_loop(llm, policy, tools, files, control.reporter(), limits, oversight, start)
            if planner is not None:
                await planner.finish()
        if outcome.status == "done":  # SPEC 7: commit, push, open or update the PR/MR
            blocked = environment.blocked_section()
            final = await clone.deliver(outcome.comment, requester, files.run_uuid, config.language, blocked)
            change_url = clone.change_url()
            if change_url is not None:
                await asyncio.to_thread(self._store.note_change, str(task.key), change_url)
            outcome = replace(outcome, comment="\n\n".join(part for part in (final, blocked) if part))
        return outcome

    @staticmethod
    async def _conversation(
        source: Source,
        task: Task,
        reporter: IssueReporter,
        reply_to: ThreadRef | None,
        writers: frozenset[str],
    ) -> tuple[list[Comment], list[Thread], TrustCache]:
        """The task's comments and review threads, and whose words among them are trusted
        (`writers`: whom the claim found to have write access); the reporter answers in the
        thread that asked for the run."""
        comments, threads, trust = await TaskRunner._read_conversation(source, task, reply_to, writers)
        if reply_to is None:
            reporter.settle_thread(request_thread(task, comments, threads, trust, source.bot_name))
        return comments, threads, trust

    @staticmethod
    async def _read_conversation(
        source: Source, task: Task, reply_to: ThreadRef | None, writers: frozenset[str]
    ) -> tuple[list[Comment], list[Thread], TrustCache]:
        comments = await source.list_comments(task.key)
        threads = await source.list_threads(task.key) if task.key.is_change else []
        if reply_to is not None:  # asked in a thread of the agent's PR/MR: that thread is context
            threads += [t for t in await source.list_threads(reply_to.change) if t.id == reply_to.thread_id]
        trust = TrustCache(writers)
        authors = {task.author} | {c.author for c in comments} | {c.author for t in threads for c in t.comments}
        await trust.load(source, task.key, authors)
        return comments, threads, trust

    @staticmethod
    async def _request_thread(source: Source, task: Task, writers: frozenset[str]) -> str | None:
        """The review thread that asked for a run that ended before reading its conversation."""
        comments, threads, trust = await TaskRunner._read_conversation(source, task, None, writers)
        return request_thread(task, comments, threads, trust, source.bot_name)

    def _compressor(self, ledger: RunLedger) -> Compressor:
        storage = self._config.context_storage
        return Compressor(
            self._config.llm.active.context_length,
            storage.compression_threshold,
            storage.keep_recent_messages,
            model_summarizer(self._llm_factory, ledger.record_usage),
        )

    async def _leave_finishing(
        self, key: str, ledger: RunLedger, files: RunContextFiles, steps: int, attempts: int
    ) -> RunResult:
        """The outcome is recorded (run_marks) but not out: let the next cycle publish it.

        The run stays `running` without a lease, which is what `Recovery` takes over: any
        worker's next cycle continues it from its recorded outcome (the final comment is
        not posted twice: its posting is marked in the store).
        """
        files.write_metadata(publish_attempts=attempts)
        await ledger.stored(self._store.release_lease, key, self._owner)
        log.warning("%s: run %s is finishing; its outcome is published at the next cycle", key, files.run_uuid)
        return RunResult(files.run_uuid, key, "finishing", steps, files.directory)
