import secrets

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


def test_json_is_the_redacted_value_encoded_whatever_the_secrets_and_values() -> None:
    """`Redactor.json` skips the walk over values whose text shows nothing to redact: it
    must give exactly what encoding the redacted value gives, for secrets JSON escapes
    (quotes, backslashes, newlines), non-ASCII ones, secrets met in keys or numbers, and
    values with token shapes, checked over generated structures."""
    import json
    import random

    token = "ghp_" + "Q" * 24
    secret_sets = [[], ["s3cr3t-v4lue"], ['quo"te-secret'], ["back\\slash-secret"], ["line\nbreak-secret"], ["ünï-cödé-secret"], ["1234"]]
    words = ["plain", "s3cr3t-v4lue", 'quo"te-secret', "back\\slash-secret", "line\nbreak-secret", "ünï-cödé-secret",
             f"Bearer {token}", token, "token " + "t" * 31, "1234", "é", "", " "]  # fmt: skip
    chance = random.Random(8)

    def value(depth: int) -> object:
        kind = chance.randrange(6 if depth < 3 else 3)
        if kind == 0:
            return "".join(chance.choice(words) for _ in range(chance.randint(0, 3)))
        if kind == 1:
            return chance.choice([0, 1234, 1.5, None, True])
        if kind == 2:
            return chance.choice(words)
        if kind == 3:
            return [value(depth + 1) for _ in range(chance.randint(0, 3))]
        if kind == 4:
            return tuple(value(depth + 1) for _ in range(chance.randint(0, 2)))
        return {chance.choice(words): value(depth + 1) for _ in range(chance.randint(0, 3))}

    for secrets in secret_sets:
        redactor = Redactor(secrets)
        for _ in range(1500):
            item = value(0)
            for indent in (None, 1):
                expected = json.dumps(redactor.data(item), ensure_ascii=False, indent=indent, default=str)
                assert redactor.json(item, indent=indent) == expected, (secrets, item)


def test_a_password_in_a_proxy_variable_is_a_secret_to_mask() -> None:
    """The proxy variables reach git and the HTTP clients (their errors may quote them);
    a password in one is masked like a configured secret."""
    from coding_agent.config import parse_config

    password = "pw" + secrets.token_hex(8)
    environ = {
        "HTTPS_PROXY": f"http://proxy-user:{password}@proxy.example:3128",
        "http_proxy": "http://proxy.example:3128",
        "ALL_PROXY": "socks5://other:" + password[::-1] + "@socks.example:1080",
        "NO_PROXY": "localhost",
    }
    llm = {"provider": "openai", "openai": {"model": "m", "base_url": "http://127.0.0.1:1/v1"}}
    config = parse_config({"task_source": "github", "github": {"token": "t" * 8, "owner": "o"}, "llm": llm}, env={})
    redactor = Redactor(config.secrets(environ))
    said = redactor.text(f"proxy refused http://proxy-user:{password}@proxy.example:3128 and {password[::-1]}")
    assert password not in said and password[::-1] not in said, said
    assert "proxy.example" in said, "only the password is a secret"
    assert config.secrets({}) == config.secrets({"HTTPS_PROXY": "http://proxy.example:3128"})
