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
    "repeated_failure": {
        "en": "Note: this exact call ({tool} with the same arguments) has now failed {count} times in a row. Do not repeat it; change your approach.",
        "ja": "注意: この呼び出し（{tool}、同じ引数）は {count} 回連続で失敗しています。繰り返さず、方針を変えてください。",
    },
}


def notice(name: str, language: Language, **values: object) -> str:
    """The notice `name` in `language`, with `values` filled in."""
    return _NOTICES[name][language].format(**values)
