"""SPEC 15, acting with the bot's rights through words: what the agent posts does nothing.

A prompt-injected model ends its answer with GitLab quick actions on lines of their own;
GitLab (and the sandbox, which runs them as GitLab does: as the text's author, the bot)
would merge, approve, label and assign on the bot's rights. And model text the host
puts into the progress comment (the plan's goal, action descriptions and summaries,
step comments) carries HTML, images, links and mentions that must stay inert words.
Each test runs the service against the sandbox forges and the replay model.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from coding_agent.context.storage import ContextStorage
from coding_agent.redaction import Redactor
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.sources.gitlab.quick_actions import neutralise_quick_actions

from tests.support.state import agent_store

from ._planning import action, plan, planning_config
from ._steering import assign, run_cycle
from .conftest import (
    BOT,
    HELLO_SCRIPT,
    MAINTAINER,
    REPO,
    ForgeUnderTest,
    GitLabForge,
    llm_section,
    load_for_service,
    progress_comments,
    write_config,
)

JOINER = "\u200d"
EVE = "eve"
# Lines a model could end with; GitLab runs those at column 0, the agent neutralises also the others.
INJECTED = ["/merge", "/approve", "/label ~x", f"/assign @{EVE}", f"/unassign @{BOT}", "/close", "  /merge", "> /approve"]
ANSWER = "\n".join(["Reviewed the change; it reads well.", *INJECTED, "", "Nothing else to do: `/merge` is up to you."])
# What GitLab would take for a command: a line starting with `/word`; blanks and `>` too, to be strict.
COMMAND_LINE = re.compile(r"^[\s>]*/\w", re.MULTILINE)


def _bot_bodies(forge: ForgeUnderTest, kind: Any, number: int) -> list[str]:
    return [body for author, body in forge.comments(kind, number) if author == BOT]


def _assert_nothing_ran(forge: GitLabForge, item: Any) -> None:
    """No quick action ran on `item` (a sandbox copy): open, unapproved, unlabelled `x`, not assigned to eve."""
    assert item.quick_actions == [], item.quick_actions
    assert item.state == "opened" and item.approved_by == [] and "x" not in item.labels
    eve = forge.sandbox.state.find_user(EVE)
    assert eve is not None and eve.id not in item.assignee_ids


def test_a_final_answer_of_quick_actions_on_a_merge_request_runs_none(forge: ForgeUnderTest, tmp_path: Path) -> None:
    state: Any = forge.sandbox.state  # type: ignore[attr-defined]
    state.add_user(EVE)
    number = forge.open_task("change", "Tidy the widget", "An MR to look at.")
    assign(forge, "change", number, BOT)
    with ReplaySandbox({"replies": [{"done": ANSWER}]}) as model:
        setup = write_config(tmp_path, [forge], llm_section(model))
        report = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["done"]
    [final] = [body for body in _bot_bodies(forge, "change", number) if "Reviewed the change" in body]
    if not isinstance(forge, GitLabForge):
        assert final == ANSWER, "GitHub has no quick actions: the answer posts as written"
        return
    mr = state.merge_request(REPO, number)
    _assert_nothing_ran(forge, mr)
    assert BOT in state.assignees_of(REPO, number, kind="mr")
    assert "coding agent done" in mr.labels
    assert COMMAND_LINE.search(final) is None, final
    assert final.replace(JOINER, "") == ANSWER, "the words read as the model wrote them"


def test_a_summary_of_quick_actions_in_a_new_merge_request_runs_none(gitlab_forge: GitLabForge, tmp_path: Path) -> None:
    state = gitlab_forge.sandbox.state
    state.add_user(EVE)
    number = gitlab_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    script = {
        "replies": [
            {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hello\n"}, "comment": "Writing hello.txt."},
            {"done": ANSWER},
        ]
    }
    with ReplaySandbox(script) as model:
        setup = write_config(tmp_path, [gitlab_forge], llm_section(model))
        report = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["done"]
    [mr] = state.require_project(REPO).merge_requests.values()
    _assert_nothing_ran(gitlab_forge, state.merge_request(REPO, mr.iid))
    assert mr.title == "Draft: Add a greeting file" and mr.description.startswith(f"Closes #{number}")
    assert COMMAND_LINE.search(mr.description) is None, mr.description
    assert ANSWER in mr.description.replace(JOINER, ""), "the summary reads as the model wrote it"
    issue = state.issue(REPO, number)
    assert issue.quick_actions == [] and issue.state == "opened" and "x" not in issue.labels
    [final] = [body for body in _bot_bodies(gitlab_forge, "issue", number) if "Reviewed the change" in body]
    assert COMMAND_LINE.search(final) is None and final.replace(JOINER, "").startswith(ANSWER)
    assert "merge request !" in final


def test_a_takeover_finds_the_neutralised_final_comment_its_predecessor_posted(
    gitlab_forge: GitLabForge, tmp_path: Path
) -> None:
    """The dead worker posted the final comment (neutralised, as GitLab holds it) but died
    before saying so: the next worker reads it back as the recorded words, and posts none."""
    state = gitlab_forge.sandbox.state
    number = gitlab_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    state.remove_label(REPO, number, "coding agent", actor=BOT)
    state.add_label(REPO, number, "coding agent processing", actor=BOT)
    key = f"gitlab:{REPO}#{number}"
    ContextStorage(tmp_path / "contexts", Redactor()).start_run("dead-run", task_key=key)
    with agent_store(tmp_path) as store:
        store.runs.start_run("dead-run", key, "dead-worker", MAINTAINER)
        store.steering.record_final("dead-run", "done", ANSWER)
        assert store.leases.acquire_lease(key, "dead-worker", -1), "a lease that has already run out"
    state.add_note(REPO, number, BOT, neutralise_quick_actions(ANSWER))
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = write_config(tmp_path, [gitlab_forge], llm_section(model))
        report = run_cycle(load_for_service(setup))

    assert [(result.run_uuid, result.status) for result in report.results] == [("dead-run", "done")]
    finals = [body for body in _bot_bodies(gitlab_forge, "issue", number) if "Reviewed the change" in body]
    assert len(finals) == 1, "the final comment is not posted twice"
    assert state.issue(REPO, number).quick_actions == []


# ------------------------------------------------------------------ host-rendered model text


HOSTILE = "@org/team <img src=http://x/t.png> [link](http://evil) ![i](http://x/i.png) &#64;bob"
# GitHub's and GitLab's mention rule: an `@` not after a word character, then a name.
MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9_]")


def _rendered(markdown: str) -> str:
    """`markdown` as HTML, as a CommonMark renderer that passes raw HTML through makes it."""
    return MarkdownIt("commonmark").render(markdown)


def _assert_inert(markdown: str) -> None:
    """Nothing in `markdown` embeds, links or pings; its words still read as the model wrote them."""
    rendered = _rendered(markdown)
    assert "<img" not in rendered and "<a " not in rendered, rendered
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    assert MENTION.search(text) is None, text
    assert "http://" not in text, "no bare URL for the forge to autolink"
    for words in ("@org/team", "<img src=http://x/t.png>", "[link](http://evil)", "![i](http://x/i.png)", "&#64;bob"):
        assert words in text.replace(JOINER, ""), words


@pytest.mark.parametrize("progress", [True, False], ids=["progress_comment", "checklist_comments"])
def test_plan_text_in_the_progress_comment_is_inert(forge: ForgeUnderTest, progress: bool, tmp_path: Path) -> None:
    number = forge.open_task("issue", "One file", "Please write a.txt.")
    hostile_plan = plan(action("a1", f"Write a.txt for {HOSTILE}"))
    hostile_plan["goal_understanding"]["main_objective"] = f"Ship it for {HOSTILE}"
    create = {"tool": "workspace/create", "args": {"path": "a.txt", "content": "a\n"}, "comment": f"Writing a.txt, {HOSTILE}"}
    phases = {
        "planning": [{"plan": hostile_plan}],
        "execution a1": [create, {"action_done": {"id": "a1", "status": "failed", "summary": f"failed for {HOSTILE}"}}],
        "reflection": [{"reflection": {"status": "success", "evaluation": "ok", "issues_identified": [], "plan_revision_needed": False}}],
        "verification": [{"verification": {"verification_passed": True, "issues_found": [], "placeholder_detected": {"count": 0, "locations": []}}}],
        "completion": [{"done": "Wrote a.txt."}],
    }
    with ReplaySandbox({"phases": phases}) as model:
        setup = planning_config(tmp_path, [forge], model, extra={"progress_comment": {"enabled": progress}})
        report = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["done"]
    bodies = _bot_bodies(forge, "issue", number)
    if progress:
        [shown] = progress_comments(bodies)
        assert ". Writing a.txt, " in shown.split("### Steps", 1)[-1], "the step comment is in the step list"
    else:
        shown = "\n".join(body for body in bodies if "**Goal:**" in body)
    assert "**Goal:** Ship it for" in shown and "- [ ] `a1` Write a.txt for" in shown and "❌ failed: failed for" in shown
    _assert_inert(shown)
    final = [body for body in bodies if body.startswith("Wrote a.txt.")]
    assert final, "the final comment posts as before"
