"""Unit parsing: sizes, rates, times, compute rates, plain counts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiersim.config.units import (
    parse_bytes,
    parse_count,
    parse_flops,
    parse_rate,
    parse_time,
)
from tiersim.errors import ConfigError

W = ("file.yaml", "a.b")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80 GiB", 80 * 2**30),
        ("80 GB", 80 * 10**9),
        ("80GB", 80 * 10**9),
        ("141 GB", 141 * 10**9),
        ("1 MiB", 2**20),
        ("1.5 KiB", 1536),
        ("2 TB", 2 * 10**12),
        ("1 TiB", 2**40),
        ("512 B", 512),
        (4096, 4096),
        ("1e9", 10**9),
        (" 3 GiB ", 3 * 2**30),
    ],
)
def test_parse_bytes(text: object, expected: int) -> None:
    value = parse_bytes(text, W)
    assert value == expected
    assert isinstance(value, int)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("25 GB/s", 25e9),
        ("3.35 TB/s", 3.35e12),
        ("4.8 TB/s", 4.8e12),
        ("1 GiB/s", 2.0**30),
        ("500 MB/s", 5e8),
        (1e9, 1e9),
        ("2.3e9", 2.3e9),
    ],
)
def test_parse_rate(text: object, expected: float) -> None:
    assert parse_rate(text, W) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250 ns", 250e-9),
        ("80 us", 80e-6),
        ("80 µs", 80e-6),
        ("1.5 ms", 1.5e-3),
        ("2 s", 2.0),
        ("1 min", 60.0),
        ("1 h", 3600.0),
        (0.002, 0.002),
        ("0", 0.0),
    ],
)
def test_parse_time(text: object, expected: float) -> None:
    assert parse_time(text, W) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("989 TFLOP/s", 989e12),
        ("312 TFLOPS", 312e12),
        ("1.2 PFLOP/s", 1.2e15),
        ("100 GFLOPs", 100e9),
        (1e12, 1e12),
    ],
)
def test_parse_flops(text: object, expected: float) -> None:
    assert parse_flops(text, W) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1e8", 1e8), (100000000, 1e8), ("5 G", 5e9), ("500 M", 5e8), ("2.5", 2.5), ("-3", -3.0), ("1 Ki", 1024.0)],
)
def test_parse_count(text: object, expected: float) -> None:
    assert parse_count(text, W) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("parser", "value"),
    [
        (parse_bytes, "12 parsecs"),
        (parse_bytes, "abc"),
        (parse_bytes, True),
        (parse_bytes, None),
        (parse_bytes, [1]),
        (parse_bytes, "80 GB/s"),
        (parse_bytes, "80 Gb"),  # bits are not bytes
        (parse_rate, "12 parsecs"),
        (parse_rate, "25 GB"),
        (parse_rate, "25 Gb/s"),
        (parse_rate, False),
        (parse_rate, ""),
        (parse_time, "12 parsecs"),
        (parse_time, "5 GB"),
        (parse_time, "abc"),
        (parse_time, True),
        (parse_flops, "989 TB/s"),
        (parse_flops, True),
        (parse_count, "12 parsecs"),
        (parse_count, "abc"),
        (parse_count, True),
        (parse_count, "1e999"),
        (parse_count, float("nan")),
        (parse_rate, float("inf")),
    ],
)
def test_rejects(parser, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        parser(value, W)
    assert str(info.value).startswith("file.yaml: a.b: ")
    assert info.value.source == "file.yaml" and info.value.field == "a.b"


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.sampled_from(["", "k", "M", "G", "T"]))
def test_decimal_rate_roundtrip(number: float, prefix: str) -> None:
    scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[prefix]
    parsed = parse_rate(f"{number!r} {prefix}B/s", W)
    assert math.isclose(parsed, number * scale, rel_tol=1e-12, abs_tol=1e-12)


@given(st.integers(min_value=0, max_value=2**20), st.sampled_from(["Ki", "Mi", "Gi"]))
def test_binary_size_exact(number: int, prefix: str) -> None:
    scale = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}[prefix]
    assert parse_bytes(f"{number} {prefix}B", W) == number * scale
