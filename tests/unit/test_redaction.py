from coding_agent.redaction import REDACTED, Redactor


def test_configured_secrets_and_token_shapes_are_masked() -> None:
    redactor = Redactor(["s3cret-value", "ab"])
    text = "token s3cret-value and ghp_" + "a" * 36 + " and glpat-" + "b" * 20 + " ab stays"
    masked = redactor.text(text)
    assert "s3cret-value" not in masked and "ghp_" not in masked and "glpat-" not in masked
    assert masked.count(REDACTED) == 3
    assert "ab stays" in masked, "secrets shorter than 4 characters are not treated as secrets"


def test_nested_data() -> None:
    redactor = Redactor(["topsecret"])
    assert redactor.data({"a": ["x topsecret", {"b": "topsecret"}], "n": 3}) == {
        "a": ["x ***", {"b": "***"}],
        "n": 3,
    }
