"""GitHub REST v3 JSON shapes of the sandbox's CI: check runs and their annotations,
check suites, Actions workflow runs and jobs, commit statuses and the combined status
(see `render.py`). The webhook payloads (`check_run`, `check_suite`, `workflow_run`,
`status`) are built from the same shapes, so what a test reads over REST and what the
agent receives by webhook agree.
"""

from __future__ import annotations

import zlib
from typing import Any

from coding_agent.sandbox.github.records import (
    ACTIONS_APP,
    AnnotationRecord,
    CheckRunRecord,
    StatusRecord,
    WorkflowRunRecord,
)
from coding_agent.sandbox.github.render_accounts import JSON, AccountShapes, node_id, timestamp

__all__ = ["CiShapes", "combined_state"]

# Apps exist before any check run: one fixed creation date is as good as any.
_APP_CREATED = "2018-07-30T09:30:17Z"


def combined_state(statuses: list[StatusRecord]) -> str:
    """GitHub's combined state: failure if any failed or errored, pending if any pending or
    none at all, else success."""
    states = {status.state for status in statuses}
    if states & {"error", "failure"}:
        return "failure"
    return "pending" if not states or "pending" in states else "success"


class CiShapes(AccountShapes):
    """The CI shapes for one base URL (`api`, `web`)."""

    def app(self, slug: str) -> JSON:
        number = zlib.crc32(slug.encode()) % 1_000_000 + 1
        return {
            "id": number,
            "slug": slug,
            "node_id": node_id("A", number),
            "client_id": f"Iv1.{number:08x}",
            "owner": self.login(f"{slug}[bot]"),
            "name": "GitHub Actions" if slug == ACTIONS_APP else slug,
            "description": "",
            "external_url": f"{self.web}/apps/{slug}",
            "html_url": f"{self.web}/apps/{slug}",
            "created_at": _APP_CREATED,
            "updated_at": _APP_CREATED,
            "permissions": {"checks": "write", "statuses": "write", "metadata": "read"},
            "events": ["check_run", "check_suite", "pull_request", "push"],
        }

    def ci_pulls(self, repo: str, sha: str) -> list[JSON]:
        """The open pull requests whose head is `sha`, as check runs and suites list them."""
        api = f"{self.api}/repos/{repo}"
        record = self.state.repo(repo)
        short = {"id": record.id, "url": api, "name": record.name}
        branches = self.state.branches(repo)
        pulls = [p for p in self.state.pulls(repo) if p.state == "open" and self.state.head_sha(p, branches) == sha]
        return [
            {"id": p.pull_id or p.id, "number": p.number, "url": f"{api}/pulls/{p.number}",
             "head": {"ref": p.head, "sha": sha, "repo": short},
             "base": {"ref": p.base, "sha": p.base_sha, "repo": short}}
            for p in pulls
        ]  # fmt: skip

    def check_run_html(self, record: CheckRunRecord) -> str:
        """An Actions job's page (`/actions/runs/{run}/job/{job}`), else the check's own page."""
        if record.run_id is not None:
            return f"{self.web}/{record.repo}/actions/runs/{record.run_id}/job/{record.id}"
        return f"{self.web}/{record.repo}/runs/{record.id}"

    def check_run(self, record: CheckRunRecord, pulls: list[JSON] | None = None) -> JSON:
        """`pulls`: `ci_pulls` of its commit, when the caller lists several of its check runs."""
        api = f"{self.api}/repos/{record.repo}/check-runs/{record.id}"
        html = self.check_run_html(record)
        return {
            "id": record.id,
            "head_sha": record.head_sha,
            "node_id": node_id("CR", record.id),
            "external_id": str(record.id),
            "url": api,
            "html_url": html,
            "details_url": record.details_url or html,
            "status": record.status,
            "conclusion": record.conclusion,
            "started_at": timestamp(record.started_at),
            "completed_at": timestamp(record.completed_at),
            "output": {
                "title": record.output_title,
                "summary": record.output_summary,
                "text": record.output_text,
                "annotations_count": len(record.annotations),
                "annotations_url": f"{api}/annotations",
            },
            "name": record.name,
            "check_suite": {"id": self.state.check_suite_id(record.repo, record.head_sha, record.app)},
            "app": self.app(record.app),
            "pull_requests": self.ci_pulls(record.repo, record.head_sha) if pulls is None else pulls,
        }

    def annotation(self, check: CheckRunRecord, record: AnnotationRecord) -> JSON:
        return {
            "path": record.path,
            "blob_href": f"{self.web}/{check.repo}/blob/{check.head_sha}/{record.path}",
            "start_line": record.start_line,
            "end_line": record.end_line or record.start_line,
            "start_column": None,
            "end_column": None,
            "annotation_level": record.annotation_level,
            "title": record.title,
            "message": record.message,
            "raw_details": None,
        }

    def check_suite(self, suite_id: int) -> JSON:
        repo, sha, app = self.state.check_suite(suite_id)
        checks = [c for c in self.state.check_runs(repo, sha) if c.app == app]
        running = any(c.status != "completed" for c in checks)
        failed = [c.conclusion for c in checks if c.conclusion not in (None, "success", "neutral", "skipped")]
        api = f"{self.api}/repos/{repo}"
        started = min((c.started_at for c in checks), default=self.state.now())
        return {
            "id": suite_id,
            "node_id": node_id("CS", suite_id),
            "head_branch": next((name for name, tip in self.state.branches(repo).items() if tip == sha), None),
            "head_sha": sha,
            "status": "in_progress" if running else "completed",
            "conclusion": None if running else (failed[0] if failed else "success"),
            "url": f"{api}/check-suites/{suite_id}",
            "before": None,
            "after": sha,
            "pull_requests": self.ci_pulls(repo, sha),
            "app": self.app(app),
            "created_at": timestamp(started),
            "updated_at": timestamp(self.state.now()),
            "latest_check_runs_count": len(checks),
            "check_runs_url": f"{api}/check-suites/{suite_id}/check-runs",
            "rerequestable": True,
            "runs_rerequestable": True,
        }

    def job(self, record: CheckRunRecord) -> JSON:
        run = self.state.workflow_run(record.repo, record.run_id or 0)
        api = f"{self.api}/repos/{record.repo}"
        return {
            "id": record.id,
            "run_id": run.id,
            "run_url": f"{api}/actions/runs/{run.id}",
            "run_attempt": record.run_attempt,
            "node_id": node_id("CR", record.id),
            "head_sha": record.head_sha,
            "url": f"{api}/actions/jobs/{record.id}",
            "html_url": self.check_run_html(record),
            "status": record.status,
            "conclusion": record.conclusion,
            "created_at": timestamp(record.started_at),
            "started_at": timestamp(record.started_at),
            "completed_at": timestamp(record.completed_at),
            "name": record.name,
            "steps": [],
            "check_run_url": f"{api}/check-runs/{record.id}",
            "labels": ["ubuntu-latest"],
            "runner_id": None,
            "runner_name": None,
            "runner_group_id": None,
            "runner_group_name": None,
            "workflow_name": run.name,
            "head_branch": run.head_branch,
        }

    def workflow_run(self, run: WorkflowRunRecord) -> JSON:
        repo = self.state.repo(run.repo)
        api = f"{self.api}/repos/{run.repo}/actions/runs/{run.id}"
        status, conclusion = self.state.workflow_run_state(run)
        actor = self.login(repo.owner)
        return {
            "id": run.id,
            "name": run.name,
            "node_id": node_id("WFR", run.id),
            "check_suite_id": self.state.check_suite_id(run.repo, run.head_sha, ACTIONS_APP),
            "head_branch": run.head_branch,
            "head_sha": run.head_sha,
            "path": ".github/workflows/ci.yml",
            "display_title": run.name,
            "run_number": run.id,
            "run_attempt": run.run_attempt,
            "event": "push",
            "status": status,
            "conclusion": conclusion,
            "workflow_id": zlib.crc32(run.name.encode()) % 1_000_000 + 1,
            "url": api,
            "html_url": f"{self.web}/{run.repo}/actions/runs/{run.id}",
            "pull_requests": self.ci_pulls(run.repo, run.head_sha),
            "created_at": timestamp(run.created_at),
            "updated_at": timestamp(self.state.now()),
            "run_started_at": timestamp(run.created_at),
            "actor": actor,
            "triggering_actor": actor,
            "jobs_url": f"{api}/jobs",
            "logs_url": f"{api}/logs",
            "check_suite_url": f"{self.api}/repos/{run.repo}/check-suites/{run.id}",
            "artifacts_url": f"{api}/artifacts",
            "cancel_url": f"{api}/cancel",
            "rerun_url": f"{api}/rerun",
            "workflow_url": f"{self.api}/repos/{run.repo}/actions/workflows/{run.name}",
            "head_commit": None,
            "repository": self.repo(repo),
            "head_repository": self.repo(repo),
        }

    def status(self, record: StatusRecord) -> JSON:
        return {
            "url": f"{self.api}/repos/{record.repo}/statuses/{record.sha}",
            "avatar_url": f"{self.web}/avatars/{record.creator}",
            "id": record.id,
            "node_id": node_id("SC", record.id),
            "state": record.state,
            "description": record.description,
            "target_url": record.target_url,
            "context": record.context,
            "created_at": timestamp(record.created_at),
            "updated_at": timestamp(record.created_at),
            "creator": self.login(record.creator),
        }

    def combined_status(self, repo: str, sha: str, statuses: list[StatusRecord], page: list[StatusRecord]) -> JSON:
        api = f"{self.api}/repos/{repo}/commits/{sha}"
        return {
            "state": combined_state(statuses),
            "statuses": [self.status(status) for status in page],
            "sha": sha,
            "total_count": len(statuses),
            "repository": self.repo(self.state.repo(repo)),
            "commit_url": api,
            "url": f"{api}/status",
        }

    # ------------------------------------------------------------ webhook payloads

    def ci_webhook(self, event: str, action: str, repo: str, subject: int) -> JSON:
        """The payload of CI webhook `event` about `subject` (a `status` has no action)."""
        body: dict[str, Any]
        if event == "status":
            status = self.state.status(subject)
            body, sender = self._status_event(status), status.creator
        elif event == "check_run":
            check = self.state.check_run(repo, subject)
            shape = self.check_run(check)
            shape["check_suite"] = self.check_suite(shape["check_suite"]["id"])
            body, sender = {"action": action, "check_run": shape}, f"{check.app}[bot]"
        elif event == "check_suite":
            suite = self.check_suite(subject)
            body, sender = {"action": action, "check_suite": suite}, f"{suite['app']['slug']}[bot]"
        elif event == "workflow_run":
            run = self.workflow_run(self.state.workflow_run(repo, subject))
            workflow = {"id": run["workflow_id"], "name": run["name"], "path": run["path"], "state": "active"}
            body, sender = {"action": action, "workflow_run": run, "workflow": workflow}, f"{ACTIONS_APP}[bot]"
        return {**body, "repository": self.repo(self.state.repo(repo)), "sender": self.login(sender)}

    def _status_event(self, record: StatusRecord) -> JSON:
        commit = f"{self.api}/repos/{record.repo}/commits/{record.sha}"
        branches = [
            {"name": name, "commit": {"sha": tip, "url": commit}, "protected": False}
            for name, tip in self.state.branches(record.repo).items()
            if tip == record.sha
        ]
        shape = self.status(record)
        return {
            **{key: shape[key] for key in ("id", "target_url", "context", "description", "state")},
            **{key: shape[key] for key in ("created_at", "updated_at")},
            "sha": record.sha,
            "name": record.repo,
            "commit": {"sha": record.sha, "url": commit, "html_url": f"{self.web}/{record.repo}/commit/{record.sha}"},
            "branches": branches,
        }
