"""The dashboard's HTML: the layout, and each live part of a page as its own template.

Every part is rendered on the server by Jinja2 with autoescaping, both for the first
page and for each live update (the browser swaps the part's rendered HTML in): one
renderer, so a page and its updates cannot disagree, and forge text (titles, comments,
requesters) is escaped in one place. Links come only from stored http(s) URLs or task
keys (percent-encoded), never from text.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment

from coding_agent.web.views import STATES

__all__ = [
    "LIST_ROWS", "ago", "counts_line", "duration", "render_list", "render_problem", "render_parts", "render_rows",
    "render_task", "render_usage",
]  # fmt: skip


def duration(seconds: float | None) -> str:
    """A coarse duration ("<1 min", "12 min", "1 h 5 min", "2 d 3 h"): it changes once a
    minute at most, so a live list is not re-sent every second for a clock."""
    if seconds is None:
        return ""
    minutes = int(seconds // 60)
    if minutes < 1:
        return "<1 min"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def ago(stamp: float | None, now: float) -> str:
    if stamp is None:
        return ""
    text = duration(max(0.0, now - stamp))
    return "just now" if text == "<1 min" else f"{text} ago"


_ENV = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
_ENV.filters["url"] = lambda key: quote(str(key), safe="")
_ENV.filters["num"] = lambda value: f"{int(value or 0):,}"
_ENV.filters["duration"] = duration
_ENV.globals["ago"] = ago
_ENV.globals["query"] = lambda **params: urlencode({k: v for k, v in params.items() if v})

_STYLE = """
:root{--ink:#1d2330;--muted:#5d6678;--line:#e3e6ec;--bg:#f7f8fa;--card:#fff;--link:#1f5fbf}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--ink);background:var(--bg)}
header.top{background:#1d2330;color:#fff;padding:.7rem 2rem;display:flex;gap:1.5rem;align-items:baseline}
header.top b{font-weight:600;letter-spacing:.02em}header.top a{color:#cfd8ea;text-decoration:none}
header.top a:hover{color:#fff}
main{max-width:1280px;margin:0 auto;padding:1.5rem 2rem 3rem}
h1{font-size:1.5rem;margin:.2rem 0 .6rem;font-weight:650;overflow-wrap:anywhere}
h2{font-size:1.1rem;margin:2rem 0 .6rem;font-weight:600}
a{color:var(--link)}
.muted,.sub{color:var(--muted)}.sub{font-size:.85rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:1rem 1.2rem}
table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line);border-radius:8px}
th,td{padding:.55rem .75rem;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-size:.78rem;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600;background:#fbfbfc}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:last-child td{border-bottom:0}
.title{font-weight:600;text-decoration:none;color:var(--ink);overflow-wrap:anywhere;display:-webkit-box;
-webkit-line-clamp:2;-webkit-box-orient:vertical;overflow:hidden}
a.title:hover{color:var(--link);text-decoration:underline}
.kind{display:inline-block;font-size:.7rem;font-weight:600;border:1px solid var(--line);border-radius:4px;padding:0 .3rem;color:var(--muted)}
.pill{display:inline-block;font-size:.78rem;font-weight:600;border-radius:999px;padding:.05rem .6rem;white-space:nowrap}
.s-waiting{background:#eceff4;color:#4c566a}.s-running{background:#dbeafe;color:#1e4fa3}
.s-paused{background:#fef3c7;color:#8a5a00}.s-done{background:#dcfce7;color:#166534}
.s-failed{background:#fee2e2;color:#991b1b}.s-stopped{background:#ede9fe;color:#5b21b6}
.s-abandoned{background:#f1f1f1;color:#666}
.reason{font-size:.85rem;color:#7a2020;margin-top:.2rem;overflow-wrap:anywhere;min-width:12rem}
.doing{font-size:.85rem;color:var(--muted);overflow-wrap:break-word;min-width:9rem}
form.filters{display:flex;gap:.8rem;align-items:end;margin:.4rem 0 1rem;flex-wrap:wrap}
form.filters label{display:flex;flex-direction:column;font-size:.75rem;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
select,button{font:inherit;font-size:.9rem;padding:.3rem .6rem;border:1px solid #c8cdd6;border-radius:6px;background:#fff}
button{cursor:pointer;font-weight:600}button:disabled{cursor:not-allowed;opacity:.45}
button.danger{color:#991b1b;border-color:#e5b4b4}
.facts{display:flex;flex-wrap:wrap;gap:.4rem 1.6rem;margin:.2rem 0 .2rem}
.facts div{display:flex;flex-direction:column}.facts dt{font-size:.72rem;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.facts dd{margin:0;font-weight:500;overflow-wrap:anywhere}
.actions{display:flex;gap:.5rem;align-items:center;margin:1rem 0}
#message{font-size:.9rem}#message.error{color:#991b1b;font-weight:600}
ol.checklist{list-style:none;padding:0;margin:.6rem 0 0}
ol.checklist li{padding:.3rem 0;display:flex;gap:.6rem;align-items:baseline;border-bottom:1px dashed var(--line)}
ol.checklist li:last-child{border-bottom:0}
.box{display:inline-block;width:1.1rem;text-align:center;font-weight:700}
li.done .box{color:#166534}li.running .box{color:#1e4fa3}li.failed .box{color:#991b1b}
li.dropped .text{text-decoration:line-through;color:var(--muted)}li.skipped .text{color:var(--muted)}
.note{font-size:.85rem;color:var(--muted)}
code{font:.85em ui-monospace,SFMono-Regular,Menlo,monospace;overflow-wrap:anywhere}
.comment{border-left:3px solid #cfd5df;padding:.2rem 0 .2rem .9rem;margin:.7rem 0}.comment.posted{border-color:#4a9d6f}
.comment .meta{font-size:.8rem;color:var(--muted);margin:0}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.2rem 0 0;font:.85rem/1.45 ui-monospace,SFMono-Regular,Menlo,monospace}
.live{font-size:.8rem;color:var(--muted)}.live::before{content:"●";color:#16a34a;margin-right:.3rem}
.live.off::before{color:#aaa}
.empty{padding:1.2rem;color:var(--muted)}
"""

_LAYOUT = _ENV.from_string("""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{{ title }} - coding-agent</title>
<style>{{ style }}</style></head><body>
<header class="top"><b>coding-agent</b><nav><a href="/">Tasks</a> · <a href="/usage">Token use</a></nav></header>
<main>{{ body|safe }}</main></body></html>""")

_ROWS = """{% for t in tasks %}
<tr data-task="{{ t.task }}" data-state="{{ t.state }}">
<td><a class="title" href="/tasks/{{ t.task|url }}" title="{{ t.title or t.task }}">{{ t.title or t.task }}</a>
<div class="sub"><span class="kind">{{ t.kind }}</span>
{% if t.url %}<a class="issue" href="{{ t.url }}" rel="noreferrer">{{ t.task }}</a>{% else %}{{ t.task }}{% endif %}
{% if t.change_url and t.kind == "issue" %} · <a class="change" href="{{ t.change_url }}" rel="noreferrer">{{ "PR" if t.forge == "github" else "MR" }}</a>{% endif %}</div></td>
<td class="repo">{{ t.repository }}</td>
<td><span class="pill s-{{ t.state }}">{{ t.state }}</span>
{% if t.queue_position %}<div class="sub queue">#{{ t.queue_position }} in queue</div>{% endif %}{% if t.ci %}<div class="sub ci">CI {{ t.ci }}</div>{% endif %}{% if t.reason %}<div class="reason" title="{{ t.reason }}">{{ t.reason }}</div>{% endif %}</td>
<td class="doing">{{ t.doing if t.doing and t.state != "waiting" else "" }}</td>
<td class="requester">{{ t.requester or "" }}</td>
<td class="time">{% if t.state == "waiting" %}<span title="{{ t.queued_at }}">queued {{ ago(t.queued, now) }}</span>
{% elif t.started %}<span title="{{ t.started_at }}">{{ ago(t.started, now) }}</span>
<div class="sub">{{ "ran" if t.state in ("done", "failed", "stopped", "abandoned") else "for" }} {{ t.elapsed_seconds|duration }}</div>{% endif %}</td>
<td class="num">{{ t.steps }}</td><td class="num">{{ t.tokens|num }}</td></tr>
{% else %}<tr><td colspan="8" class="empty" id="empty">{{ "No task matches these filters." if filtered else "No task has run yet." }}</td></tr>
{% endfor %}"""

_LIST = _ENV.from_string("""<h1>Tasks</h1>
<p class="muted"><span id="counts">{{ counts }}</span> · <span id="live" class="live off">live</span></p>
<form class="filters" method="get" action="/">
{% for name, label, values in [("state", "State", states), ("repository", "Repository", repositories), ("requester", "Requester", requesters)] %}
<label>{{ label }}<select name="{{ name }}" id="filter-{{ name }}"><option value="">all</option>
{% for value in values %}<option{% if chosen[name] == value %} selected{% endif %}>{{ value }}</option>{% endfor %}</select></label>
{% endfor %}<button type="submit">Filter</button>{% if filtered %}<a href="/">clear</a>{% endif %}</form>
<table id="tasks"><thead><tr><th>Task</th><th>Repository</th><th>State</th><th>Doing now</th><th>Requester</th>
<th>Started</th><th class="num">Steps</th><th class="num">Tokens</th></tr></thead>
<tbody id="task-rows">""" + _ROWS + """</tbody></table>
<p class="sub" id="more"{% if not hidden %} hidden{% endif %}>{{ hidden }} older tasks are not shown: filter by state, repository or requester to find them.</p>
<script>
// The filter applies on change; the rows follow the server's list without a reload.
for (const select of document.querySelectorAll("form.filters select")) select.onchange = () => select.form.submit();
const live = document.getElementById("live");
const events = new EventSource("/events" + location.search);
events.onopen = () => live.classList.remove("off");
events.onerror = () => live.classList.add("off");
events.onmessage = (event) => {
  const update = JSON.parse(event.data);  // HTML rendered and escaped by the server
  document.getElementById("task-rows").innerHTML = update.rows;
  document.getElementById("counts").textContent = update.counts;
  const more = document.getElementById("more");
  more.hidden = !update.hidden; more.textContent = update.hidden + " older tasks are not shown: filter by state, repository or requester to find them.";
};
</script>""")

_SUMMARY = """<dl class="facts">
<div><dt>State</dt><dd><span id="state" class="pill s-{{ t.state }}">{{ t.state }}</span>{% if t.requested %} <span class="sub" id="requested">{{ t.requested }} requested</span>{% endif %}</dd></div>
<div><dt>Doing now</dt><dd id="doing">{{ t.doing or ("—" if t.state not in ("done", "failed", "stopped", "abandoned") else "ended") }}</dd></div>
<div><dt>{{ "Ran" if t.state in ("done", "failed", "stopped", "abandoned") else "Running for" if t.started else "Queued" }}</dt>
<dd id="elapsed">{% if t.started %}{{ t.elapsed_seconds|duration }}{% else %}#{{ t.queue_position }} in queue{% endif %}</dd></div>
<div><dt>Steps</dt><dd id="steps">{{ t.steps }}</dd></div>
<div><dt>Tokens</dt><dd id="tokens">{{ t.tokens|num }}</dd></div>
<div><dt>Requester</dt><dd id="requester">{{ t.requester or "—" }}</dd></div>
<div><dt>Started</dt><dd>{% if t.started %}<span title="{{ t.started_at }}">{{ ago(t.started, now) }}</span>{% else %}—{% endif %}
{% if t.finished_at and t.state in ("done", "failed", "stopped", "abandoned") %} · ended <span title="{{ t.finished_at }}">{{ ago(t.finished, now) }}</span>{% endif %}</dd></div>
<div><dt>Budget left</dt><dd id="budget">{{ t.budget_left if t.budget_left is not none else "—" }}</dd></div>
<div><dt>CI</dt><dd id="ci">{{ t.ci or "—" }}</dd></div>
</dl>
{% if t.reason %}<p id="reason" class="reason">{{ t.reason }}</p>{% endif %}
<p id="error" hidden>{{ t.error or "" }}</p>"""

_PLAN = """{% if t.plan %}<h2>Plan</h2><div class="card">
<p id="plan-headline"><b>{{ t.plan.goal }}</b><br><span class="sub">Phase: <span id="phase">{{ t.plan.phase }}</span>
· {{ t.plan.done }}/{{ t.plan.total }} actions done · {{ t.plan.revisions }} revisions · {{ t.plan.steps }} steps</span></p>
{% if t.plan.error %}<p class="reason">{{ t.plan.error }}</p>{% endif %}
<ol id="plan" class="checklist">{% for item in t.plan["items"] %}<li class="{{ item.status }}"><span class="box">{{
{"done": "✓", "running": "▸", "failed": "✗", "dropped": "–", "skipped": "–"}.get(item.status, "○") }}</span>
<span><code>{{ item.id }}</code> <span class="text">{{ item.text }}</span>{% if item.note %} <span class="note">{{ item.note }}</span>{% endif %}</span></li>{% endfor %}</ol>
</div>{% endif %}"""

_RUNS = """<thead><tr><th>Run</th><th>State</th><th class="num">Steps</th><th class="num">Tokens</th><th>Started</th><th>Ended</th></tr></thead><tbody>
{% for r in t.runs %}<tr><td><code>{{ r.run }}</code></td><td><span class="pill s-{{ r.state }}">{{ r.state }}</span></td>
<td class="num">{{ r.steps }}</td><td class="num">{{ r.tokens|num }}</td><td title="{{ r.started_at }}">{{ ago(r.started, now) }}</td>
<td title="{{ r.finished_at or '' }}">{{ ago(r.finished, now) if r.finished else "" }}</td></tr>
{% else %}<tr><td colspan="6" class="empty">No run yet: the task waits in the queue.</td></tr>{% endfor %}</tbody>"""

_CALLS = """{% for c in t.tool_calls %}<tr><td title="{{ c.at or '' }}">{{ (c.at or "")[11:19] }}</td><td class="tool">{{ c.tool }}</td>
<td><code>{{ c.args }}</code></td><td class="status">{{ c.status }}</td><td><code>{{ c.result }}</code></td></tr>
{% else %}<tr><td colspan="5" class="empty">No tool call yet.</td></tr>{% endfor %}"""

_COMMENTS = """{% for c in t.comments %}<div class="comment{{ ' posted' if c.posted else '' }}">
<p class="meta">{{ "posted by this run" if c.posted else "@" ~ c.author }}{% if c.at %} at {{ c.at }}{% endif %}</p>
<pre>{{ c.body }}</pre></div>{% else %}<p class="empty">No comment yet.</p>{% endfor %}"""

_PARTS = {
    "summary": _ENV.from_string(_SUMMARY),
    "plan-section": _ENV.from_string(_PLAN),
    "runs": _ENV.from_string(_RUNS),
    "tool-call-rows": _ENV.from_string(_CALLS),
    "comments": _ENV.from_string(_COMMENTS),
}

_TASK = _ENV.from_string("""<p class="sub"><a href="/">Tasks</a> / {{ t.repository }}</p>
<h1 id="title">{{ t.title or t.task }}</h1>
<p class="sub"><span class="kind">{{ t.kind }}</span>
{% if t.url %}<a id="issue-link" href="{{ t.url }}" rel="noreferrer">{{ t.task }}</a>{% else %}{{ t.task }}{% endif %}
{% if t.change_url and t.kind == "issue" %} · <a id="change-link" href="{{ t.change_url }}" rel="noreferrer">{{ "pull request" if t.forge == "github" else "merge request" }}</a>{% endif %} · <span id="live" class="live off">live</span></p>
<div class="card" id="summary">{{ parts.summary|safe }}</div>
<div class="actions">
<button id="pause" data-action="pause"{% if not t.actions.pause %} disabled{% endif %}>Pause</button>
<button id="resume" data-action="resume"{% if not t.actions.resume %} disabled{% endif %}>Resume</button>
<button id="stop" class="danger" data-action="stop"{% if not t.actions.stop %} disabled{% endif %}>Stop</button>
<span id="message" role="status"></span></div>
<section id="plan-section">{{ parts["plan-section"]|safe }}</section>
<h2>Runs</h2><table id="runs">{{ parts.runs|safe }}</table>
<h2>Tool calls</h2><table id="tool-calls"><thead><tr><th>Time</th><th>Tool</th><th>Arguments</th><th>Status</th><th>Result</th></tr></thead>
<tbody id="tool-call-rows">{{ parts["tool-call-rows"]|safe }}</tbody></table>
<h2>Comments</h2><div id="comments">{{ parts.comments|safe }}</div>
<script>
const key = {{ t.task|tojson }}, path = encodeURIComponent(key);
const message = document.getElementById("message"), live = document.getElementById("live");
let actions = {{ t.actions|tojson }}, busy = false;
function enableButtons() {
  for (const button of document.querySelectorAll("button[data-action]")) button.disabled = busy || !actions[button.dataset.action];
}
function say(text, isError) { message.textContent = text; message.className = isError ? "error" : ""; }
// One stream for the whole page: every part is rendered (and escaped) by the server
// from one read of the store, so the header, the runs and the plan always agree.
const events = new EventSource("/tasks/" + path + "/events");
events.onopen = () => live.classList.remove("off");
events.onerror = () => live.classList.add("off");
events.onmessage = (event) => {
  const task = JSON.parse(event.data);
  for (const [id, html] of Object.entries(task.html)) document.getElementById(id).innerHTML = html;
  actions = task.actions; enableButtons();
};
for (const button of document.querySelectorAll("button[data-action]")) {
  button.onclick = async () => {
    const action = button.dataset.action;
    if (action === "stop" && !confirm("Stop " + key + "? The run ends at its next step and cannot be resumed.")) return;
    busy = true; enableButtons(); say(action + "…", false);
    try {
      // JSON, as the API takes for a state change (a form from another site cannot send it).
      const reply = await fetch("/api/tasks/" + path + "/" + action,
        {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"});
      const text = await reply.text();
      let answer = {};
      try { answer = JSON.parse(text); } catch (error) { answer = {}; }
      if (reply.ok) say(answer.message || action + " requested", false);
      else say(answer.error || answer.message || ("the dashboard answered " + reply.status + " " + reply.statusText), true);
    } catch (error) {
      say("the dashboard did not answer: " + error.message, true);
    } finally { busy = false; enableButtons(); }
  };
}
</script>""")

_USAGE = _ENV.from_string("""<h1>Token use</h1>
<p class="muted">{{ u.total.tokens|num }} tokens ({{ u.total.prompt_tokens|num }} prompt, {{ u.total.completion_tokens|num }} completion) over {{ u.total.runs }} runs</p>
{% for title, label, rows, kind in [("Per requester", "Requester", u.requesters, "requester"), ("Per repository", "Repository", u.repositories, "repository"), ("Per task", "Task", u.tasks, "task")] %}
<h2>{{ title }}</h2><table id="usage-{{ kind }}"><thead><tr><th>{{ label }}</th><th class="num">Prompt</th><th class="num">Completion</th>
<th class="num">Total</th><th class="num">Runs</th>{% if kind != "task" and u.budgets_set %}<th>Left today</th>{% endif %}</tr></thead><tbody>
{% for name, e in rows.items() %}<tr><td>{% if kind == "task" %}<a href="/tasks/{{ name|url }}">{{ titles.get(name) or name }}</a>{% if titles.get(name) %} <span class="sub">{{ name }}</span>{% endif %}
{% else %}<a href="/?{{ query(**{kind: name}) }}">{{ name }}</a>{% endif %}</td>
<td class="num">{{ e.prompt_tokens|num }}</td><td class="num">{{ e.completion_tokens|num }}</td><td class="num">{{ e.tokens|num }}</td><td class="num">{{ e.runs }}</td>
{% if kind != "task" and u.budgets_set %}<td class="budget">{{ e.budget_left or "—" }}</td>{% endif %}</tr>
{% endfor %}</tbody><tfoot><tr><th>Total</th><th class="num">{{ u.total.prompt_tokens|num }}</th><th class="num">{{ u.total.completion_tokens|num }}</th>
<th class="num">{{ u.total.tokens|num }}</th><th class="num">{{ u.total.runs }}</th>{% if kind != "task" and u.budgets_set %}<td></td>{% endif %}</tr></tfoot></table>{% endfor %}""")

_PROBLEM = _ENV.from_string("<h1>{{ title }}</h1><p>{{ message }} <a href=\"/\">All tasks</a></p>")


def _page(title: str, body: str) -> str:
    return _LAYOUT.render(title=title, body=body, style=_STYLE)


def counts_line(rows: list[dict[str, Any]]) -> str:
    waiting = sum(1 for row in rows if row["state"] == "waiting")
    running = sum(1 for row in rows if row["state"] == "running")
    return f"{len(rows)} tasks · {running} running · {waiting} waiting"


_ROWS_TEMPLATE = _ENV.from_string(_ROWS)
# The list page shows this many tasks (waiting and running ones first); a person reads no
# more, and the page stays fast with thousands in the store. Filters reach the rest.
LIST_ROWS = 200


def render_rows(rows: list[dict[str, Any]], filtered: bool, now: float | None = None) -> str:
    """The list's rows alone: what a live update of the list sends."""
    return _ROWS_TEMPLATE.render(tasks=rows[:LIST_ROWS], filtered=filtered, now=time.time() if now is None else now)


def render_list(all_rows: list[dict[str, Any]], rows: list[dict[str, Any]], chosen: dict[str, str | None]) -> str:
    """The task list page: `rows` (filtered from `all_rows`, which give the filters' choices)."""
    repositories = sorted({row["repository"] for row in all_rows if row["repository"]})
    requesters = sorted({row["requester"] for row in all_rows if row["requester"]})
    body = _LIST.render(
        tasks=rows[:LIST_ROWS], hidden=max(0, len(rows) - LIST_ROWS), now=time.time(), states=STATES, repositories=repositories, requesters=requesters,
        chosen=chosen, filtered=any(chosen.values()), counts=counts_line(rows),
    )  # fmt: skip
    return _page("Tasks", body)


def render_part(name: str, detail: dict[str, Any], now: float | None = None) -> str:
    return _PARTS[name].render(t=detail, now=time.time() if now is None else now)


def render_parts(detail: dict[str, Any]) -> dict[str, str]:
    now = time.time()
    return {name: render_part(name, detail, now) for name in _PARTS}


def render_task(detail: dict[str, Any]) -> str:
    return _page(detail["title"] or detail["task"], _TASK.render(t=detail, parts=render_parts(detail)))


def render_usage(usage: dict[str, Any], titles: dict[str, str]) -> str:
    return _page("Token use", _USAGE.render(u=usage, titles=titles))


def render_problem(title: str, message: str) -> str:
    return _page(title, _PROBLEM.render(title=title, message=message))
