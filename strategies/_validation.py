"""Argument checks shared by the strategies, raising Hypothesis's InvalidArgument."""

from typing import Any

from hypothesis.errors import InvalidArgument


def check_int(value: Any, name: str, *, min_value: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be an integer")
    if min_value is not None and value < min_value:
        raise InvalidArgument(f"{name}={value!r} must be at least {min_value}")


def check_range(lo: int, hi: int, lo_name: str, hi_name: str) -> None:
    check_int(lo, lo_name, min_value=0)
    check_int(hi, hi_name, min_value=0)
    if lo > hi:
        raise InvalidArgument(f"{lo_name}={lo} must not exceed {hi_name}={hi}")
