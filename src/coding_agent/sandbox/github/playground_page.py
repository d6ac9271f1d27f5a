"""The HTML and script of the sandbox forge's playground page (`playground.py`).

Plain HTML and a little vanilla JavaScript, no build step. The server renders only the
names it was started with (escaped); the script fetches the issues as JSON every
second and writes every piece of text with `textContent`, never as markup: titles and
comments come from people and from the model. Each issue's section is built once and
then updated in place, so a comment being typed survives the refresh.
"""

from __future__ import annotations

from html import escape

__all__ = ["page_html"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 60rem; padding: 0 1rem; color: #1f2328; }
header p { color: #59636e; }
form, section.issue { border: 1px solid #d1d9e0; border-radius: 6px; padding: 0.8rem 1rem; margin: 0.8rem 0; }
input, textarea { width: 100%; box-sizing: border-box; font: inherit; margin: 0.2rem 0 0.5rem; }
textarea { min-height: 3.5rem; }
button { font: inherit; margin-right: 0.4rem; }
.labels span, .assignees span { background: #ddf4ff; border-radius: 1em; padding: 0 0.6em; margin-right: 0.3em; }
.comments { list-style: none; padding: 0; }
.comments li { border-top: 1px solid #eaeef2; padding: 0.4rem 0; }
.comments pre, .body { white-space: pre-wrap; margin: 0.2rem 0; font-family: inherit; }
.author { font-weight: 600; }
#message { min-height: 1.5em; color: #0969da; }
"""

_SCRIPT = """
const root = document.body.dataset.api;
const sections = new Map();

function say(text) { document.getElementById("message").textContent = text; }

async function send(path, payload) {
  const response = await fetch(root + path, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(payload || {}),
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) { say("Refused: " + (answer.error || response.status)); return null; }
  await refresh();
  return answer;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(className, text, action) {
  const node = element("button", className, text);
  node.type = "button";
  node.addEventListener("click", action);
  return node;
}

function newSection(number) {
  const section = element("section", "issue");
  section.dataset.issue = String(number);
  const parts = {
    title: element("h2", "title"), body: element("p", "body"), labels: element("p", "labels"),
    assignees: element("p", "assignees"), pulls: element("ul", "pulls"), comments: element("ol", "comments"),
  };
  const text = element("textarea", "comment-body");
  text.placeholder = "A comment as the maintainer (the agent reads it at its next step)";
  const actions = element("p", "actions");
  actions.append(
    button("label", "Label 'coding agent' (and assign the bot)", () =>
      send("/issues/" + number + "/label").then((ok) => ok && say("#" + number + " labelled: the agent picks it up in a second or two."))),
    button("comment", "Comment", async () => {
      if (await send("/issues/" + number + "/comments", {body: text.value})) { text.value = ""; say("Commented on #" + number + "."); }
    }),
    button("unassign", "Unassign the bot", () =>
      send("/issues/" + number + "/unassign").then((ok) => ok && say("Bot unassigned from #" + number + ": a running task stops at its next check."))),
  );
  section.append(parts.title, parts.body, parts.labels, parts.assignees, parts.pulls, parts.comments, text, actions);
  sections.set(number, parts);
  return section;
}

function tags(node, heading, names) {
  node.replaceChildren(document.createTextNode(heading + ": "));
  if (!names.length) node.append(document.createTextNode("none"));
  for (const name of names) node.append(element("span", "", name));
}

function show(issue) {
  const list = document.getElementById("issues");
  if (!sections.has(issue.number)) list.prepend(newSection(issue.number));
  const parts = sections.get(issue.number);
  parts.title.textContent = "#" + issue.number + " " + issue.title + (issue.state === "open" ? "" : " (" + issue.state + ")");
  parts.body.textContent = issue.body;
  tags(parts.labels, "labels", issue.labels);
  tags(parts.assignees, "assignees", issue.assignees);
  parts.pulls.replaceChildren(...issue.pulls.map((pull) => element("li", "pull",
    "Pull request #" + pull.number + (pull.draft ? " (draft)" : "") + ": " + pull.title +
    " | branch " + pull.branch + " | files changed: " + (pull.files.join(", ") || "none"))));
  parts.comments.replaceChildren(...issue.comments.map((comment) => {
    const item = element("li", "comment");
    item.append(element("span", "author", "@" + comment.author), document.createTextNode(" at " + comment.created_at));
    item.append(element("pre", "", comment.body));
    return item;
  }));
}

async function refresh() {
  try {
    const response = await fetch(root + "/issues");
    const data = await response.json();
    for (const issue of data.issues.slice().reverse()) show(issue);
  } catch (error) { say("The sandbox forge does not answer: is `coding-agent demo --serve` still running?"); }
}

document.getElementById("new-issue").addEventListener("submit", async (event) => {
  event.preventDefault();
  const title = document.getElementById("new-title"), body = document.getElementById("new-body");
  const answer = await send("/issues", {title: title.value, body: body.value});
  if (answer) { title.value = ""; body.value = ""; say("Opened #" + answer.number + ": label it to give it to the agent."); }
});
refresh();
setInterval(refresh, 1000);
"""


def page_html(repo: str, maintainer: str, bot: str, dashboard_url: str | None) -> str:
    """The whole page; the names given are escaped, everything else is static."""
    dashboard = (
        f'<a href="{escape(dashboard_url, quote=True)}" target="_blank" rel="noopener">the dashboard</a>'
        if dashboard_url
        else "the dashboard"
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>{escape(repo)}: coding-agent playground</title>
<style>{_STYLE}</style></head>
<body data-api="/_playground">
<header><h1>{escape(repo)}</h1>
<p>The sandbox forge of <code>coding-agent demo --serve</code>. You are @{escape(maintainer)}, a maintainer.
Open an issue, label it for @{escape(bot)}, and watch it work here and on {dashboard}.
Comment while it runs, or unassign the bot to stop it.</p></header>
<p id="message" role="status"></p>
<form id="new-issue"><h2>New issue</h2>
<label>Title <input id="new-title" name="title" required maxlength="256"></label>
<label>Description <textarea id="new-body" name="body"></textarea></label>
<button type="submit" id="open-issue">Open the issue</button></form>
<div id="issues"></div>
<script>{_SCRIPT}</script>
</body></html>
"""
