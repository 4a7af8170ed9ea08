"""``from_file`` answers every bad file with a ``ConfigError`` naming the file and what is
wrong (it raised a raw ``UnicodeDecodeError`` and ``RecursionError``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from redis_ratelimit_client import ConfigError, from_file

GOOD = """
[[policy]]
name = "api"
[[policy.limit]]
name = "per-key"
key = "rl:{key}"
algorithm = "fixed_window"
limit = 10
window_s = 60
"""


def test_a_good_file_reads(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(GOOD, encoding="utf-8")
    assert [policy.name for policy in from_file(path)] == ["api"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (GOOD.encode().replace(b'"api"', b'"api\xff"'), "is not UTF-8 text: byte 0xff at offset"),
        (b"a = " + b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b"x = {" * 5000 + b"1" + b"}" * 5000, "nested too deeply"),
        (GOOD.encode().replace(b"limit = 10", b"limit = 10\nlimt = 3"), "unknown field 'limt'"),
        (b"[[policy]\n", "bad configuration"),
    ],
    ids=["not-utf8", "deep-array", "deep-table", "unknown-field", "not-toml"],
)
def test_a_bad_file_is_a_config_error_naming_it(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "policies.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        from_file(path)
    assert str(path) in str(raised.value)
    assert problem in str(raised.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the configuration file"):
        from_file(tmp_path / "absent.toml")
