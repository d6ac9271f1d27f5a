"""File logging: redacted, rotated daily, rotated files gzip-compressed."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from coding_agent.config import LoggingConfig
from coding_agent.llm.openai_client import OpenAICompatibleClient
from coding_agent.logging_setup import configure_logging
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.replay_model import ReplaySandbox


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_secrets_are_redacted_and_rotated_files_are_gzipped(tmp_path: Path, restore_root_logging: None) -> None:
    path = configure_logging(LoggingConfig(dir=str(tmp_path)), Redactor(["hunter2-secret"]), console=False)
    log = logging.getLogger("coding_agent.test")
    log.info("token is %s", "hunter2-secret")
    try:
        raise RuntimeError("failed with hunter2-secret inside")
    except RuntimeError:
        log.exception("boom")
    [handler] = [h for h in logging.getLogger().handlers if hasattr(h, "doRollover")]
    handler.doRollover()  # type: ignore[attr-defined]
    log.info("after rollover")
    for h in logging.getLogger().handlers:
        h.flush()

    rotated = list(tmp_path.glob("coding-agent.log.*.gz"))
    assert len(rotated) == 1, list(tmp_path.iterdir())
    old = gzip.decompress(rotated[0].read_bytes()).decode()
    assert "token is ***" in old and "RuntimeError" in old, "tracebacks stay in the file log, redacted"
    assert "hunter2-secret" not in old
    assert "after rollover" in path.read_text()


def test_console_line_only_when_asked(tmp_path: Path, restore_root_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LoggingConfig(dir=str(tmp_path)), Redactor([]), console=True)
    logging.getLogger("coding_agent.test").info("claimed github:a/b#1")
    logging.getLogger("some.library").info("library chatter")
    err = capsys.readouterr().err
    assert "claimed github:a/b#1" in err and "library chatter" not in err


async def test_the_model_clients_requests_are_not_logged_one_by_one(tmp_path: Path, restore_root_logging: None) -> None:
    """The HTTP libraries' line per request is noise in the file log, and a write per step."""
    path = configure_logging(LoggingConfig(dir=str(tmp_path)), Redactor([]), console=False)
    with ReplaySandbox({"replies": [{"text": "Hello."}]}) as model:
        llm = OpenAICompatibleClient(model="replay", base_url=model.openai_base_url, api_key="k", retry=RetryPolicy(retries=0))
        llm.send_user_message("Say hello.")
        reply = await llm.get_response()
        await llm.aclose()
    logging.getLogger("coding_agent.test").info("after the request")
    for handler in logging.getLogger().handlers:
        handler.flush()
    assert reply.content == "Hello."
    text = path.read_text()
    assert "after the request" in text and "HTTP Request" not in text, text
