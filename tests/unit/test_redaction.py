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


def test_every_token_shape_is_masked_and_text_without_one_is_returned_as_is() -> None:
    shapes = [
        *(f"gh{kind}_" + "A1" * 12 for kind in "pousr"),
        "github_pat_" + "B_2" * 10,
        "glpat-" + "c-3" * 8,
        "sk-" + "d_4-" * 6,
        "Bearer " + "e.5" * 8,
        "token " + "f-6" * 12,
    ]
    for shape in shapes:
        assert Redactor().text(f"see {shape} here") != f"see {shape} here", shape
    code = "def length(self) -> int:\n    return len(self.items)  # right, though high\n" * 40
    assert Redactor().text(code) is code


def test_the_marker_check_never_skips_a_text_the_pattern_would_change() -> None:
    """The token pattern only runs on text holding one of _TOKEN_MARKERS: fuzz texts made
    of the markers' and the shapes' pieces and check that skipping changes nothing."""
    import random

    from coding_agent import redaction

    pieces = [
        "gh", "p_", "o_", "u_", "s_", "r_", "x_", "github_", "pat_", "gl", "pat-", "s", "k-", "sk", "-",
        "Bearer", "Bearer ", "bearer ", "token", "token ", " ", "_", ".", "A" * 9, "a1" * 6, "Z-9" * 4, "é", "\n",
    ]  # fmt: skip
    chance = random.Random(15)
    for _ in range(20000):
        text = "".join(chance.choice(pieces) for _ in range(chance.randint(1, 12)))
        marked = redaction._may_hold_a_token(text)
        assert marked == any(marker in text for marker in redaction._TOKEN_MARKERS), text
        if not marked:
            assert redaction._TOKEN_SHAPES.sub(REDACTED, text) == text, text
