"""The dashboard's pages (SPEC 11.3): the task list, and a task page whose progress,
tool calls, comments and plan checklist update live through server-sent events.

Server-rendered HTML (Jinja2, autoescaped) with a few lines of plain JavaScript: an
`EventSource` for the live part and `fetch` for the buttons. No front-end build, no
framework to ship; SSE because the updates only flow one way and the browser reconnects
by itself. The buttons call the JSON API, which acts through the same code as the CLI.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import quote

from jinja2 import Environment
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from coding_agent.redaction import Redactor
from coding_agent.runtime.state_store import StateStore
from coding_agent.web.activity import RunActivity
from coding_agent.web.views import task_detail, task_list, usage

__all__ = ["dashboard_routes"]

_ENV = Environment(autoescape=True)
_ENV.filters["url"] = lambda key: quote(str(key), safe="")

_LAYOUT = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{{ title }} - coding-agent</title>
<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}
td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left}.state{font-weight:bold}
#plan li.done{color:#186a18}.comment{border-left:3px solid #ccc;padding-left:.8em}.comment.posted{border-color:#4a7}
pre{white-space:pre-wrap;margin:.2em 0 1em}</style>
</head><body><nav><a href="/">Tasks</a> · <a href="/usage">Token use</a></nav>{{ body|safe }}</body></html>"""

_TASKS = _ENV.from_string("""<h1>Tasks</h1>
{% if not tasks %}<p id="empty">No task has run yet.</p>{% endif %}
<table id="tasks"><tr><th>Task</th><th>State</th><th>Requester</th><th>Steps</th><th>Tokens</th><th>Started</th><th>Ended</th></tr>
{% for t in tasks %}<tr data-task="{{ t.task }}"><td><a href="/tasks/{{ t.task|url }}">{{ t.task }}</a></td>
<td class="state">{{ t.state }}</td><td>{{ t.requester or "" }}</td><td>{{ t.steps }}</td><td>{{ t.tokens }}</td>
<td>{{ t.started_at or "" }}</td><td>{{ t.finished_at or "" }}</td></tr>{% endfor %}</table>""")

_TASK = _ENV.from_string("""<h1>{{ t.task }}</h1>
<p>State: <span id="state" class="state">{{ t.state }}</span> · steps: <span id="steps">{{ t.steps }}</span>
· tokens: <span id="tokens">{{ t.tokens }}</span> · requester: {{ t.requester or "" }}</p>
<p>Started {{ t.started_at }}{% if t.finished_at %}, ended {{ t.finished_at }}{% endif %}</p>
<p id="error">{{ t.error or "" }}</p>
<p><button id="pause" data-action="pause">Pause</button> <button id="resume" data-action="resume">Resume</button>
<button id="stop" data-action="stop">Stop</button> <span id="message"></span></p>
<h2>Runs</h2><table><tr><th>Run</th><th>State</th><th>Steps</th><th>Tokens</th><th>Started</th><th>Ended</th></tr>
{% for r in t.runs %}<tr><td>{{ r.run }}</td><td>{{ r.state }}</td><td>{{ r.steps }}</td><td>{{ r.tokens }}</td>
<td>{{ r.started_at }}</td><td>{{ r.finished_at or "" }}</td></tr>{% endfor %}</table>
<section id="plan-section"{% if not t.plan %} hidden{% endif %}><h2>Plan</h2>
<p id="plan-headline">{{ t.plan.headline if t.plan else "" }}</p>
<ul id="plan">{% for line in (t.plan.lines if t.plan else []) %}<li class="{{ 'done' if line.done else 'open' }}">{{ line.text }}</li>{% endfor %}</ul>
</section>
<h2>Tool calls</h2><table id="tool-calls"><thead><tr><th>Time</th><th>Tool</th><th>Arguments</th><th>Status</th><th>Result</th></tr></thead>
<tbody>{% for c in t.tool_calls %}<tr><td>{{ c.at or "" }}</td><td class="tool">{{ c.tool }}</td><td><code>{{ c.args }}</code></td>
<td class="status">{{ c.status }}</td><td><code>{{ c.result }}</code></td></tr>{% endfor %}</tbody></table>
<h2>Comments</h2><div id="comments">{% for c in t.comments %}<div class="comment{{ ' posted' if c.posted else '' }}">
<p class="meta">{{ "posted by this run" if c.posted else "@" ~ c.author }}{% if c.at %} at {{ c.at }}{% endif %}</p>
<pre>{{ c.body }}</pre></div>{% endfor %}</div>
<script>
const key = {{ t.task|tojson }}, path = encodeURIComponent(key);
// Live parts are rebuilt with textContent only: comment bodies and tool arguments are
// written by anyone and must never become markup.
function cell(row, text, tag = "td", inner = null) {
  const element = row.appendChild(document.createElement(tag));
  (inner ? element.appendChild(document.createElement(inner)) : element).textContent = text ?? "";
  return element;
}
function renderPlan(plan) {
  document.getElementById("plan-section").hidden = !plan;
  document.getElementById("plan-headline").textContent = plan ? plan.headline : "";
  const list = document.getElementById("plan");
  list.replaceChildren(...(plan ? plan.lines : []).map((line) => {
    const item = document.createElement("li");
    item.className = line.done ? "done" : "open";
    item.textContent = line.text;
    return item;
  }));
}
function renderToolCalls(calls) {
  const body = document.querySelector("#tool-calls tbody");
  body.replaceChildren(...calls.map((call) => {
    const row = document.createElement("tr");
    cell(row, call.at); cell(row, call.tool).className = "tool"; cell(row, call.args, "td", "code");
    cell(row, call.status).className = "status"; cell(row, call.result, "td", "code");
    return row;
  }));
}
function renderComments(comments) {
  document.getElementById("comments").replaceChildren(...comments.map((comment) => {
    const box = document.createElement("div");
    box.className = comment.posted ? "comment posted" : "comment";
    cell(box, (comment.posted ? "posted by this run" : "@" + comment.author) + (comment.at ? " at " + comment.at : ""), "p").className = "meta";
    cell(box, comment.body, "pre");
    return box;
  }));
}
const events = new EventSource("/tasks/" + path + "/events");
events.onmessage = (event) => {
  const task = JSON.parse(event.data);
  for (const name of ["state", "steps", "tokens"]) document.getElementById(name).textContent = task[name];
  document.getElementById("error").textContent = task.error || "";
  renderPlan(task.plan); renderToolCalls(task.tool_calls || []); renderComments(task.comments || []);
};
for (const button of document.querySelectorAll("button[data-action]")) {
  button.onclick = async () => {
    // JSON, as the API takes for a state change (a form from another site cannot send it).
    const reply = await fetch("/api/tasks/" + path + "/" + button.dataset.action,
      {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"});
    const answer = await reply.json().catch(() => ({}));
    document.getElementById("message").textContent = answer.message || answer.error || reply.statusText;
  };
}
</script>""")

_USAGE = _ENV.from_string("""<h1>Token use</h1>{% for title, rows in [("Per task", u.tasks), ("Per requester", u.requesters)] %}
<h2>{{ title }}</h2><table><tr><th></th><th>Prompt</th><th>Completion</th><th>Runs</th></tr>
{% for name, e in rows.items() %}<tr><td>{{ name }}</td><td>{{ e.prompt_tokens }}</td><td>{{ e.completion_tokens }}</td>
<td>{{ e.runs }}</td></tr>{% endfor %}</table>{% endfor %}""")

_PAGE = _ENV.from_string(_LAYOUT)
_EVENT_INTERVAL_SECONDS = 0.5


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    """`body` is already rendered (and escaped) by its own template."""
    return HTMLResponse(_PAGE.render(title=title, body=body), status_code=status)


def dashboard_routes(store: StateStore, redactor: Redactor, activity: RunActivity | None = None) -> list[Route]:
    async def tasks(request: Request) -> Response:
        rows = await run_in_threadpool(task_list, store, redactor)
        return _page("Tasks", _TASKS.render(tasks=rows))

    async def task(request: Request) -> Response:
        key = request.path_params["key"]
        detail = await run_in_threadpool(task_detail, store, key, redactor, activity)
        if detail is None:
            return _page("Not found", _ENV.from_string("<p>No task {{ k }}.</p>").render(k=key), status=404)
        return _page(key, _TASK.render(t=detail))

    async def events(request: Request) -> Response:
        key = request.path_params["key"]

        async def stream() -> AsyncIterator[str]:
            last = None
            while not await request.is_disconnected():
                detail = await run_in_threadpool(task_detail, store, key, redactor, activity)
                if detail is not None:
                    detail.pop("runs")
                    text = json.dumps(detail)
                    if text != last:
                        last = text
                        yield f"data: {text}\n\n"
                await asyncio.sleep(_EVENT_INTERVAL_SECONDS)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def usage_page(request: Request) -> Response:
        return _page("Token use", _USAGE.render(u=await run_in_threadpool(usage, store)))

    return [
        Route("/", tasks, methods=["GET"]),
        Route("/usage", usage_page, methods=["GET"]),
        Route("/tasks/{key:path}/events", events, methods=["GET"]),
        Route("/tasks/{key:path}", task, methods=["GET"]),
    ]
