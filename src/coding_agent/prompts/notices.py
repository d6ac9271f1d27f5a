"""The agent's own notices on the issue, in the configured `language` (en or ja).

Only the agent's own words live here (error, limit, refusal); the model writes the rest.
One table, so that a notice is worded once and translated once.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["notice", "Language"]

Language = Literal["en", "ja"]

_NOTICES: dict[str, dict[Language, str]] = {
    "failed": {
        "en": "## ❌ coding-agent failed\n\n{reason}\n\nThe task is labelled `{label}`. Fix the cause and re-apply the trigger label to try again.",
        "ja": "## ❌ coding-agent 失敗\n\n{reason}\n\nタスクに `{label}` ラベルを付けました。原因を解消してから、トリガーラベルを付け直すと再実行します。",
    },
    "limit_steps": {
        "en": "The run reached its step limit ({limit} model turns) before the model said it was done.",
        "ja": "モデルが完了を宣言する前に、ステップ数の上限（{limit} ターン）に達しました。",
    },
    "limit_tokens": {
        "en": "The run used its token budget ({limit} tokens) before the model said it was done.",
        "ja": "モデルが完了を宣言する前に、トークン予算（{limit} トークン）を使い切りました。",
    },
    "limit_seconds": {
        "en": "The run used its time budget ({limit} seconds) before the model said it was done.",
        "ja": "モデルが完了を宣言する前に、時間予算（{limit} 秒）を使い切りました。",
    },
    "invalid_replies": {
        "en": "The model gave {count} replies in a row without usable JSON, so the run was stopped.",
        "ja": "モデルが {count} 回続けて解釈できる JSON を返さなかったため、実行を中止しました。",
    },
    "error": {
        "en": "The run could not go on: {message}",
        "ja": "実行を続けられませんでした: {message}",
    },
    "untrusted_trigger": {
        "en": "coding-agent did not start: @{user} applied the trigger label but does not have write access to this repository. A maintainer (write access or above) must apply it.",
        "ja": "coding-agent は開始しませんでした: @{user} がトリガーラベルを付けましたが、このリポジトリへの書き込み権限がありません。書き込み権限以上を持つメンバーが付け直してください。",
    },
    "unknown_trigger": {
        "en": "coding-agent did not start: it could not tell who applied the trigger label, so it could not check their access. A maintainer (write access or above) must apply it.",
        "ja": "coding-agent は開始しませんでした: トリガーラベルを付けたユーザーが分からず、権限を確認できませんでした。書き込み権限以上を持つメンバーが付け直してください。",
    },
    "followup_ack": {
        "en": "Thank you, @{user}! Glad it helps. I consider this conversation finished; mention me again if anything else comes up.",
        "ja": "@{user} さん、ありがとうございます！この会話はこれで完了とします。ほかに何かあれば、またメンションしてください。",
    },
    "repeated_failure": {
        "en": "Note: this exact call ({tool} with the same arguments) has now failed {count} times in a row. Do not repeat it; change your approach.",
        "ja": "注意: この呼び出し（{tool}、同じ引数）は {count} 回連続で失敗しています。繰り返さず、方針を変えてください。",
    },
    "loop_guard_warning": {
        "en": "Loop guard: you have now repeated {what} {count} times in a row with the same result. Repeating it again will not change anything: do something different, or finish.",
        "ja": "ループ検知: {what} を同じ結果のまま {count} 回続けて繰り返しています。繰り返しても何も変わりません。別の方法を取るか、作業を終えてください。",
    },
    "loop_guard_failed": {
        "en": "The model was stuck: it repeated {what} {count} times in a row with the same result, so the run was stopped.",
        "ja": "モデルが同じ動作を繰り返して進まなくなりました: {what} を同じ結果のまま {count} 回続けたため、実行を中止しました。",
    },
    # -- steering (SPEC 8): stop, pause, progress ---------------------------------------
    "stopped": {
        "en": "## ⛔ Task stopped\n\n{reason}\n\n**Stopped at:** {time}\n**LLM turns:** {turns}\n\nTo start again, assign the coding agent again and apply the `{label}` label.",
        "ja": "## ⛔ タスク停止\n\n{reason}\n\n**停止時刻:** {time}\n**LLM対話回数:** {turns}\n\nタスクを再開する場合は、コーディングエージェントを再度アサインし、\n`{label}` ラベルを付与してください。",
    },
    "stop_reason_unassigned": {
        "en": "The coding agent was unassigned, so it stopped working on this task.",
        "ja": "コーディングエージェントのアサインが解除されたため、タスクを停止しました。",
    },
    "stop_reason_operator": {
        "en": "An operator stopped the coding agent (`coding-agent stop`).",
        "ja": "オペレーターがコーディングエージェントを停止しました（`coding-agent stop`）。",
    },
    "paused": {
        "en": "## ⏸️ Task paused\n\n{reason}\n\n**Paused at:** {time}\n**LLM turns so far:** {turns}\n\nThe work so far is saved. {resume}",
        "ja": "## ⏸️ タスク一時停止\n\n{reason}\n\n**一時停止時刻:** {time}\n**これまでのLLM対話回数:** {turns}\n\nここまでの作業は保存されています。{resume}",
    },
    "pause_reason_signal": {
        "en": "The operator's pause signal is set.",
        "ja": "オペレーターの一時停止シグナルが設定されています。",
    },
    "pause_reason_operator": {
        "en": "An operator paused the coding agent (`coding-agent pause`).",
        "ja": "オペレーターがコーディングエージェントを一時停止しました（`coding-agent pause`）。",
    },
    "pause_reason_shutdown": {
        "en": "The coding agent is shutting down.",
        "ja": "コーディングエージェントが終了処理中です。",
    },
    "resume_auto": {
        "en": "It continues from the next step once the agent runs again without the pause signal.",
        "ja": "一時停止シグナルがない状態でエージェントが再び動くと、次のステップから再開します。",
    },
    "resume_manual": {
        "en": "It continues from the next step after `coding-agent resume {key}`.",
        "ja": "`coding-agent resume {key}` の後、次のステップから再開します。",
    },
    "progress_header": {"en": "## 🤖 coding-agent progress", "ja": "## 🤖 coding-agent 進捗"},
    "progress_status": {"en": "**Status:** {state} · {steps} step(s)", "ja": "**状態:** {state} · {steps} ステップ"},
    "progress_updated": {"en": "**Updated:** {time} · run `{run}`", "ja": "**更新:** {time} · 実行 `{run}`"},
    "progress_plan": {"en": "### Plan", "ja": "### 計画"},
    "progress_steps": {"en": "### Steps", "ja": "### ステップ"},
    "progress_earlier": {"en": "- … {count} earlier step(s)", "ja": "- … ほか {count} ステップ"},
    "progress_actions": {"en": "### Last actions", "ja": "### 直近の操作"},
    "progress_running": {"en": "🔄 working", "ja": "🔄 作業中"},
    "progress_paused": {"en": "⏸️ paused", "ja": "⏸️ 一時停止中"},
    "progress_done": {"en": "✅ done", "ja": "✅ 完了"},
    "progress_failed": {"en": "❌ failed", "ja": "❌ 失敗"},
    "progress_stopped": {"en": "⛔ stopped", "ja": "⛔ 停止"},
    "progress_abandoned": {"en": "⚠️ interrupted (taken over by a new run)", "ja": "⚠️ 中断（新しい実行が引き継ぎ）"},
}


def notice(name: str, language: Language, **values: object) -> str:
    """The notice `name` in `language`, with `values` filled in."""
    return _NOTICES[name][language].format(**values)
