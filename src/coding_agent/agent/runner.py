"""One run of one claimed task, from the first prompt to the final label.

Sets up what the loop needs (context files, workspace, MCP servers, the model), runs
the loop, and publishes the outcome: the final comment and the done or failed label.
Whatever goes wrong, the run ends with consistent labels, one comment saying what
happened (never a stack trace or a secret), and its context moved to `completed/`.

Its parts live beside it: `reporter.py` (the run's comments, and where it answers),
`trust.py` (the conversation, and whose words are trusted), `ledger.py` (the run's
progress writes and its lease), `steering/` (checkpoints, pause, stop, the final
comment once), and `run_setup.py` (planning's policy, the first turn). The stages of a run
follow each other here, in order: `run` starts it (`_start`), works it (`_attempt`,
`_work`, `_prompt`) and has steering end it (`steering/endings.py`: the final comment
and label, or a pause or a stop).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from coding_agent.agent.environment import RunEnvironment
from coding_agent.agent.ledger import RunLedger
from coding_agent.agent.loop import LoopLimits, LoopOutcome, LoopStart, Oversight, run_loop
from coding_agent.agent.loop_policy import LoopPolicy, ProtocolPolicy
from coding_agent.agent.planning import PlanningPolicy, render_instructions
from coding_agent.agent.reporter import IssueReporter
from coding_agent.agent.run_libraries import RunLibraries
from coding_agent.agent.run_setup import ci_fix_turn, first_turn_for, planner_for
from coding_agent.agent.steering import Continuation, LeaseLost, RunControls, RunInterrupted, RunSteering
from coding_agent.agent.trust import read_conversation
from coding_agent.config import AgentConfig
from coding_agent.context.compression import Compressor, model_summarizer
from coding_agent.context.memory import MemoryKeeper
from coding_agent.context.storage import ContextStorage, RunContextFiles
from coding_agent.domain.ci import CiFix
from coding_agent.domain.delivery import PushedHead
from coding_agent.domain.lease import LeaseWatch
from coding_agent.domain.ports import RunCheckout, RunStore, Workspaces
from coding_agent.domain.tasks import Task, ThreadRef
from coding_agent.errors import AgentError, ToolsRefused
from coding_agent.llm.base import LLMClient
from coding_agent.llm.context_window import context_length_of, resolve_context_length
from coding_agent.llm.factory import create_llm_client
from coding_agent.llm.protocols import JsonTextProtocol, ReplyProtocol
from coding_agent.llm.tool_support import model_key, protocol_for, remember_refusal
from coding_agent.llm.types import ToolSpec
from coding_agent.prompts.notices import notice
from coding_agent.prompts.prompting import render_system_prompt
from coding_agent.redaction import Redactor
from coding_agent.retry import through_store_outage
from coding_agent.sources.base import Source
from coding_agent.sources.factory import retry_policy

__all__ = ["TaskRunner", "RunResult", "IssueReporter"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class RunResult:
    run_uuid: str
    task_key: str
    status: str
    steps: int
    context_dir: Path
    # A done run's push to its PR/MR branch, which the CI watch (SPEC 16) watches.
    pushed: PushedHead | None = None


@dataclass(frozen=True)
class _Run:
    """One run's parts, made as it starts (`TaskRunner._start`) and handed to each stage."""

    source: Source
    task: Task
    requester: str | None
    writers: frozenset[str]
    reply_to: ThreadRef | None
    files: RunContextFiles
    workspace: Path
    clone: RunCheckout
    ledger: RunLedger
    reporter: IssueReporter
    steering: RunSteering
    ci_fix: CiFix | None = None

    @property
    def key(self) -> str:
        return str(self.task.key)

    def result(self, status: str, steps: int, context_dir: Path) -> RunResult:
        pushed = self.clone.pushed_head() if status == "done" else None
        return RunResult(self.files.run_uuid, self.key, status, steps, context_dir, pushed)


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
        picked_at: float | None = None,
        *,
        writers: frozenset[str] = frozenset(),
        ci_fix: CiFix | None = None,
    ) -> RunResult:
        """Work `task` (already claimed by this worker) to its end; release its lease.

        `continuation`: an existing run to carry on (resumed after a pause, or taken over
        after its worker died) instead of starting a new one. `lease`: the worker's
        heartbeat; once it is lost the run stops at its next step, writing nothing more.
        `reply_to`: the review thread that asked for this run (kept in the run's metadata,
        so a continued run answers there too). `picked_at`: when the worker took the task (`time.monotonic()`); its clone holds
        every push made before then. `writers`: who the claim of this run found to have
        write access moments ago (`Claim.writers`); the run's trust starts from them.
        `ci_fix`: the failing checks a CI fix run (SPEC 16) is to fix, for its first turn.
        """
        run = await self._start(source, task, requester, continuation, lease, reply_to, picked_at, writers)
        if isinstance(run, RunResult):
            return run
        run = replace(run, ci_fix=ci_fix)
        outcome, llm, interruption = await self._attempt(run)
        try:
            if interruption is None:
                status, context_dir = await run.steering.publish(outcome)
                steps = outcome.steps
            else:
                status, context_dir = await run.steering.interrupted(interruption, llm)
                steps = run.steering.steps
            if status in ("done", "failed", "stopped"):  # a paused or finishing run's clone is kept
                await self._discard_clone(run.workspace)
            return run.result(status, steps, context_dir)
        except LeaseLost as lost:  # the store came back after an outage longer than the lease
            status, context_dir = await run.steering.interrupted(lost, llm)
            return run.result(status, run.steering.steps, context_dir)

    async def _start(
        self,
        source: Source,
        task: Task,
        requester: str | None,
        continuation: Continuation | None,
        lease: LeaseWatch | None,
        reply_to: ThreadRef | None,
        picked_at: float | None,
        writers: frozenset[str],
    ) -> _Run | RunResult:
        """The run's parts: a continued run's context reopened, or a new run's started
        (and recorded in the state store, with the thread that asked for it). A new run
        is recorded only while the worker's lease holds; the claim may have outlasted it
        (a stalled worker) and another worker taken the task: then no run starts, and the
        result says `abandoned`."""
        key = str(task.key)
        reopened = continuation.reopen(self._storage) if continuation is not None else None
        if reopened is None:
            continuation = None
            files, workspace = self._new_run(key, requester)
        else:
            files, workspace = reopened
        lease_seconds = self._config.scheduling.lease_seconds
        ledger = RunLedger(self._store, self._owner, key, files.run_uuid, lease, lease_seconds)
        if reopened is None:
            if not await self._recorded(ledger, files, key, requester):
                return RunResult(files.run_uuid, key, "abandoned", 0, files.move_to("completed"))
            if reply_to is not None:
                files.write_metadata(reply_to=str(reply_to))
        await ledger.stored(self._store.tasks.note_task, key, task.title, task.url)
        saved_thread = files.metadata.get("reply_to")
        reply_to = ThreadRef.parse(saved_thread) if saved_thread else None
        reporter = IssueReporter(source, task, self._redactor, reply_to, writers)
        paused = continuation.paused_work() if continuation is not None else None
        clone = self._workspaces.open(source, task, workspace, files.directory / "checkout.json", paused, picked_at)
        steering = RunSteering(
            self._controls, source, task, files, workspace, requester, reporter, continuation, clone, ledger
        )
        log.info("%s: run %s %s", key, files.run_uuid, "continued" if continuation is not None else "started")
        return _Run(source, task, requester, writers, reply_to, files, workspace, clone, ledger, reporter, steering)

    async def _recorded(self, ledger: RunLedger, files: RunContextFiles, key: str, requester: str | None) -> bool:
        """Record the new run in the state store, under the lease; False when the lease
        is another worker's now (nothing else of the run was written anywhere)."""
        lease_seconds, run_uuid = self._config.scheduling.lease_seconds, files.run_uuid
        try:
            if await ledger.stored(self._store.runs.start_run, run_uuid, key, self._owner, requester, lease_seconds):
                return True
        except LeaseLost:  # recorded, then the store was away for longer than the lease
            reason = "its worker lost the task's lease to another worker"
            await through_store_outage(lambda: self._store.runs.abandon_own_run(run_uuid, self._owner, 0, reason), key)
        log.warning("%s: its lease ran out before run %s started, and another worker has the task", key, files.run_uuid)
        files.write_metadata(status="abandoned")
        return False

    def _new_run(self, key: str, requester: str | None) -> tuple[RunContextFiles, Path]:
        """A new run's context files and empty workspace directory."""
        run_uuid = str(uuid.uuid4())
        llm = self._config.llm
        files = self._storage.start_run(
            run_uuid,
            task_key=key,
            requester=requester,
            provider=llm.provider,
            model=llm.active.model,
            protocol=protocol_for(llm).name,
        )
        return files, self._workspaces.directory(run_uuid)

    async def _attempt(self, run: _Run) -> tuple[LoopOutcome, LLMClient | None, RunInterrupted | None]:
        """Work the run, or take the outcome an earlier attempt recorded. Steering's
        endings (pause, stop, lease lost: SPEC 8) come back as the interruption; any other
        failure is a failed outcome that says what happened, never a stack trace or a secret."""
        key, run_uuid, language = run.key, run.files.run_uuid, self._config.language
        outcome = LoopOutcome("failed", "", run.steering.steps)
        llm: LLMClient | None = None
        async with run.ledger:  # on leaving: the last progress write awaited, the usage written
            try:
                await self.libraries.loaded()
                await resolve_context_length(self._config.llm)  # unset context_length: the server's window
                llm = self._llm_factory()
                llm.on_usage(run.ledger.record_usage)
                outcome = await self._outcome(run, llm)
            except RunInterrupted as error:
                return outcome, llm, error
            except AgentError as error:
                message = self._redactor.text(str(error))
                log.error("%s: run %s failed: %s", key, run_uuid, message)
                outcome = LoopOutcome("failed", notice("error", language, message=message), outcome.steps)
            except Exception:
                log.exception("%s: run %s failed with an internal error", key, run_uuid)
                message = "internal error (see the agent's log)"
                outcome = LoopOutcome("failed", notice("error", language, message=message), 0)
            finally:
                if llm is not None:
                    run.files.sync_messages(llm.messages)
                    await llm.aclose()
        return outcome, llm, None

    async def _outcome(self, run: _Run, llm: LLMClient) -> LoopOutcome:
        """The outcome recorded by an earlier attempt, else the run's work; then the lease
        is checked (the task is another worker's now: publish nothing) and memories kept."""
        recorded = run.steering.recorded_outcome()
        if recorded is not None:
            run.ledger.check_lease()
            return recorded
        outcome = await self._work(run, llm)
        run.ledger.check_lease()
        if self._memories is not None:
            await self._memories.after_run(llm, run.task.key, run.files.run_uuid, outcome.status, outcome.comment)
        return outcome

    async def _work(self, run: _Run, llm: LLMClient) -> LoopOutcome:
        """The clone, the environment and tools, the first prompt, the loop; at done, the delivery."""
        config, steering = self._config, run.steering
        await run.clone.prepare()
        protocol = protocol_for(config.llm)
        if config.llm.function_calling == "auto" and run.files.metadata.get("protocol") == JsonTextProtocol.name:
            protocol = JsonTextProtocol()  # a continued run that fell back (its saved replies are JSON text)
        planner = planner_for(config, protocol, run.workspace, steering, self._redactor)
        policy: LoopPolicy = planner or ProtocolPolicy(protocol)
        # The MCP SDK only once a run starts (`run --once` from cron mostly finds nothing),
        # and imported already, in a worker thread, by `self.libraries.loaded()`.
        from coding_agent.tools.hub import ToolHub

        # SPEC 7.1: the egress proxy and the setup, before the servers and the first request.
        async with RunEnvironment(
            config, run.source, run.task, run.workspace, self._redactor, run.writers
        ) as environment, ToolHub(
            environment.servers(config.mcp_servers), config.tools, run.workspace, self._redactor.secrets
        ) as hub:
            system_prompt = await self._prompt(run, llm, protocol, policy, hub.tool_specs, hub.system_prompts, environment)
            limits = LoopLimits(
                max_steps=config.max_llm_process_num,
                max_tokens=config.budget.max_tokens,
                max_seconds=config.budget.max_seconds,
                language=config.language,
            )
            oversight = Oversight(
                steering=steering,
                guard=steering.loop_guard,
                compressor=self._compressor(run.ledger),
                on_step=steering.on_step,
                on_tools_refused=self._text_fallback(run, policy, system_prompt),
                cut=steering.cut,
            )
            start = LoopStart(steering.steps, steering.pending_reply(llm))
            tools = environment.tools(steering.tools(hub))
            outcome = await run_loop(llm, policy, tools, run.files, steering.reporter(), limits, oversight, start)
            if planner is not None:
                await planner.finish()
        if outcome.status == "done":  # SPEC 7: commit, push, open or update the PR/MR
            blocked = environment.blocked_section()
            final = await run.clone.deliver(outcome.comment, run.requester, run.files.run_uuid, config.language, blocked)
            change_url = run.clone.change_url()
            if change_url is not None:
                await run.ledger.stored(self._store.tasks.note_change, run.key, change_url)
            outcome = replace(outcome, comment="\n\n".join(part for part in (final, blocked) if part))
        return outcome

    async def _prompt(
        self,
        run: _Run,
        llm: LLMClient,
        protocol: ReplyProtocol,
        policy: LoopPolicy,
        tool_specs: list[ToolSpec],
        tool_prompts: dict[str, str],
        environment: RunEnvironment,
    ) -> Callable[[ReplyProtocol], str]:
        """The system prompt and a new run's first turn; steering begins from the
        conversation they show. Returns how the system prompt reads for a protocol (a
        fallback to JSON in text renders it again)."""
        config, task = self._config, run.task
        # The conversation is read here, right before the first prompt is built from it:
        # the prompt holds the comments as they are when the model is first asked, and
        # the loop's first checkpoint, a moment later, does not list them again.
        conversation = await read_conversation(run.source, task, run.reply_to, run.writers)
        run.reporter.settle(conversation)
        # Rule files are rules only when the trigger controls them: not on a PR head
        # written by someone without write access (SPEC 15); then they are untrusted context.
        rules = run.clone.rules()
        branch_rules = rules if task.key.is_change and not conversation.trust(task.author) else {}

        def system_prompt(current: ReplyProtocol) -> str:
            instructions = current.instructions()
            if isinstance(policy, PlanningPolicy):
                instructions += "\n\n" + render_instructions(current.uses_native_tools, config.planning.max_actions)
            return render_system_prompt(
                task,
                tool_specs,
                tool_prompts,
                instructions,
                show_schemas=not current.uses_native_tools,
                language=config.language,
                repository_rules={} if branch_rules else rules,
                untrusted=conversation.trust.wrapper,
            )

        llm.send_system_prompt(system_prompt(protocol))
        if not run.steering.restore(llm):  # a continued run has its history already
            previous = await run.ledger.stored(self._store.runs.all, run.key)
            first_turn = await run.ledger.stored(  # it reads the memories from the state store
                first_turn_for,
                config, self._memories, run.source, task, conversation, run.files.run_uuid, branch_rules, previous,
            )
            ci_part = ci_fix_turn(
                run.ci_fix, conversation.trust.wrapper, config.ci.log_tail_lines, config.ci.max_prompt_chars
            )
            parts = (first_turn.text, ci_part, environment.first_turn_note())
            llm.send_user_message("\n\n".join(part for part in parts if part))
            # What the model reads, as records: the task page shows them without parsing prompts.
            run.files.record_comments(first_turn.comments, "first_turn")
        policy.prepare(llm, tool_specs)
        await run.steering.begin(conversation.comments, conversation.threads, conversation.trust)
        if (setup_note := environment.progress_note()) is not None:
            await run.steering.reporter().step_comment(setup_note)
        return system_prompt

    def _text_fallback(
        self, run: _Run, policy: LoopPolicy, system_prompt: Callable[[ReplyProtocol], str]
    ) -> Callable[[LLMClient, ToolsRefused], bool] | None:
        """`llm.function_calling: auto` (SPEC 5.1): when the server refuses the tools, the
        run goes on in JSON text (system prompt, policy, the run's recorded protocol) and
        the process remembers it for this model. None for `true`/`false`: the refusal
        fails the run, in the server's words."""
        config = self._config.llm
        if config.function_calling != "auto":
            return None

        def fall_back(llm: LLMClient, refusal: ToolsRefused) -> bool:
            if not policy.protocol.uses_native_tools:
                return False
            remember_refusal(model_key(config), refusal.server_words)
            policy.fall_back_to_text(llm)
            llm.send_system_prompt(system_prompt(policy.protocol))
            run.files.write_metadata(protocol=policy.protocol.name)
            return True

        return fall_back

    async def _discard_clone(self, workspace: Path) -> None:
        """Delete an ended run's clone (the port honours `workspace.keep_finished`). A
        paused run's is kept, and so is an abandoned one's: another worker may be continuing it."""
        await asyncio.to_thread(self._workspaces.discard, workspace)

    def _compressor(self, ledger: RunLedger) -> Compressor:
        storage = self._config.context_storage
        return Compressor(
            context_length_of(self._config.llm),
            storage.compression_threshold,
            storage.keep_recent_messages,
            model_summarizer(self._llm_factory, ledger.record_usage),
        )
