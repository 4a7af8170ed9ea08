"""Policies in code and from the Rust client's TOML format, read unchanged (the example of
``client/src/config.rs``'s docs and tests); the same arguments the Rust client sends; bad
input refused with the policy, the limit and the rule named."""

from __future__ import annotations

import re

import pytest

from redis_ratelimit_client import Algorithm, ConfigError, Fallback, Kind, Lease, Limit, Policy, PolicyError, from_toml
from redis_ratelimit_client.protocol import Acquire, Call, Refund, acquire_command, refund_commands
from servers import REPOSITORY

CONFIG_RS = (REPOSITORY / "client" / "src" / "config.rs").read_text()


def rust_examples() -> list[str]:
    """The TOML texts of config.rs: its doc example and its tests' EXAMPLE."""
    doc = re.search(r'from_toml\(r#"(.*?)"#\)', CONFIG_RS, re.S)
    example = re.search(r'const EXAMPLE: &str = r#"(.*?)"#;', CONFIG_RS, re.S)
    assert doc and example
    lines = [line.removeprefix("//!").removeprefix(" ") for line in doc.group(1).splitlines()]
    return ["\n".join(lines), example.group(1)]


def test_the_rust_clients_toml_reads_unchanged() -> None:
    documented, example = rust_examples()
    api, uploads = from_toml(documented)
    assert api.inputs == ("api_key",) and uploads.name == "uploads"
    assert api.lease == Lease(10, 40, 1.0)
    policies = from_toml(example)
    api, partner = policies
    assert api.fallback == Fallback.CLOSED and api.timeout == 0.02
    assert api.lease == Lease(10, None, 0.5)
    assert api.limits[0].algorithm.wire_args() == ["100", "1.666666667"], "the Rust client's rate text"
    assert api.limits[1].weight == 2 and api.limits[1].key.text == "rl:{{{api_key}}}:day"
    assert partner.fallback == Fallback.LOCAL
    assert partner.limits[0].max_wait_ms == 1000
    assert partner.limits[1].algorithm.kind == "concurrency" and partner.limits[1].algorithm.ttl_ms == 30000
    assert partner.limits[2].algorithm.quota == 10


def test_commands_are_the_rust_clients() -> None:
    """The expectations of client/src/store/reply.rs's tests."""
    bucket = Limit.token_bucket("b", 10, refill=5, key="k").algorithm
    window = Limit.fixed_window("w", 100, 60, key="k").algorithm
    gcra = Limit.gcra("g", 4, 10, 60, key="k").algorithm
    sliding = Limit.sliding_window("s", 100, 1, key="k").algorithm
    assert acquire_command(Acquire((Call("k", bucket, 2),), 3, 1), False)[1] == [
        "RL.TOKENBUCKET",
        "k",
        "10",
        "2",
        "6",
        "PARTIAL",
        "MIN",
        "1",
    ]
    assert acquire_command(Acquire((Call("a", bucket), Call("b", window, 3)), 2), True)[1] == [
        "RL.MULTI",
        "2",
        "a",
        "b",
        "TOKENBUCKET",
        "10",
        "2",
        "FIXED",
        "100",
        "60.000000",
        "COST",
        "2",
        "WEIGHTS",
        "1",
        "3",
    ]
    assert acquire_command(Acquire((Call("g", gcra),), 1), False)[1] == ["CL.THROTTLE", "g", "4", "10", "60", "1"]
    assert refund_commands(Refund((Call("a", sliding, 2), Call("g", gcra)), 5)) == [
        ["RL.REFUND", "a", "SLIDING", "100", "1.000000", "10"],
        ["CL.THROTTLE", "g", "4", "10", "60", "-5"],
    ]
    paced = Limit.token_bucket("q", 1, refill=1, key="q", max_wait=1.5)
    assert acquire_command(Acquire((Call("q", paced.algorithm, 1, paced.max_wait_ms),), 1), True)[1] == [
        "RL.TOKENBUCKET",
        "q",
        "1",
        "1",
        "1",
        "MAXWAIT",
        "1500",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('algorithm = "token_bucket"\ncapacity = 5\nwindow_s = 3', "'window_s' is not a parameter of token_bucket"),
        ('algorithm = "fixed_window"\nlimit = 5', "give exactly one of 'window_s' and 'window_ms'"),
        ('algorithm = "leaky"', "algorithm is token_bucket"),
        (
            'algorithm = "fixed_window"\nlimit = 0\nwindow_s = 1',
            "policy 'p', limit 'l': limit must be greater than 0 (got '0')",
        ),
        ('algorithm = "gcra"\ncolor = 1', "unknown field"),
        ('algorithm = "token_bucket"\ncapacity = 5\nrate = "x"', "rate must be a positive decimal"),
        ('algorithm = "token_bucket"\ncapacity = 0\nrefill_s = 60', "capacity must be greater than 0 (got '0')"),
    ],
)
def test_bad_configuration_names_what_is_wrong(text: str, message: str) -> None:
    base = '[[policy]]\nname = "p"\n[[policy.limit]]\nname = "l"\nkey = "k"\n'
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_toml(base + text)


def test_bad_policies_are_refused_when_built() -> None:
    bucket = Limit.token_bucket("a", 10, refill=1, key="k")
    with pytest.raises(PolicyError, match="has no limits"):
        Policy("api", [])
    with pytest.raises(PolicyError, match="two limits are named 'a'"):
        Policy("api", [bucket, bucket])
    with pytest.raises(PolicyError, match="in-flight limit: its policy cannot be leased"):
        Policy("api", [Limit.concurrency("slots", 5, 30, key="s")], lease=Lease(5))
    with pytest.raises(PolicyError, match="bad limit name"):
        Limit.token_bucket("has space", 1, refill=1, key="k")
    with pytest.raises(PolicyError, match="unbalanced brace"):
        Limit.token_bucket("a", 1, refill=1, key="k:{")
    with pytest.raises(PolicyError, match=re.escape("limit must be at most 4294967295")):
        Limit.sliding_window("w", 1 << 33, 1, key="w")
    with pytest.raises(PolicyError, match="whole microseconds"):
        Limit.fixed_window("w", 1, 0.0000001, key="w")
    with pytest.raises(PolicyError, match="only token buckets can be paced"):
        Limit.of("w", Limit.fixed_window("w", 1, 1, key="w").algorithm, key="w", max_wait=1)
    assert (
        from_toml(
            '[[policy]]\nname = "p"\n[[policy.limit]]\nname = "l"\nkey = "k"\nalgorithm = "gcra"\n'
            "max_burst = 9\ncount = 10\nperiod_s = 1"
        )[0]
        .limits[0]
        .algorithm.quota
        == 10
    )
    with pytest.raises(ConfigError, match="no policy"):
        from_toml("# nothing yet\n")


def test_a_kind_is_an_enum_that_reads_as_its_short_name() -> None:
    """``Kind`` (generated from the Rust ``kinds!``) is what an algorithm's ``kind`` is, and
    it equals, hashes and formats as the short name plans, keys and errors write."""
    algorithms = {
        Kind.TOKEN_BUCKET: Algorithm.token_bucket(10, 2),
        Kind.SLIDING_WINDOW: Algorithm.sliding_window(10, 60),
        Kind.FIXED_WINDOW: Algorithm.fixed_window(10, 60),
        Kind.SLIDING_LOG: Algorithm.sliding_log(10, 60),
        Kind.GCRA: Algorithm.gcra(4, 10, 60),
        Kind.CONCURRENCY: Algorithm.concurrency(3, 30),
    }
    assert set(algorithms) == set(Kind), "every kind is built by its constructor"
    for kind, algorithm in algorithms.items():
        assert algorithm.kind is kind
        assert algorithm.kind == kind.value and f"{algorithm.kind}" == kind.value == str(kind)
        assert {kind.value: True}[algorithm.kind], "looked up by its short name"
        assert Algorithm.from_params(kind.value, algorithm.wire_args()) == algorithm
    assert [str(kind) for kind in Kind] == ["token", "sliding", "fixed", "log", "gcra", "concurrency"]
