"""Keywords a dynamics' constructor no longer takes, answered with where they live now.

Earlier releases of nvdd (and nvalchemi) passed FIRE's step and mixing constants and NPT's
time scales and chains one by one; they are now one `FIRESettings` / `MTKParameters`
value. Without these checks an old call gets Python's bare "unexpected keyword argument",
or, passed by position, fails later with an `AttributeError` on a float.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["moved_keywords", "require_value_of"]

_Init = TypeVar("_Init", bound=Callable[..., None])


def moved_keywords(
    argument: str, kind: type, fields: Mapping[str, str]
) -> Callable[[_Init], _Init]:
    """Wrap an `__init__` whose old keywords now live in its `argument`, one `kind` value:
    each keyword of `fields` (old name -> how it is written inside `kind(...)`) raises a
    `TypeError` with the call to write instead."""

    def decorate(init: _Init) -> _Init:
        @functools.wraps(init)
        def checked(self: Any, *args: Any, **kwargs: Any) -> None:
            old = [name for name in fields if name in kwargs]
            if old:
                inside = ", ".join(fields[name] for name in old)
                raise TypeError(
                    f"{type(self).__name__}() takes {', '.join(old)} no longer as keywords: "
                    f"pass {argument}={kind.__name__}({inside})"
                )
            init(self, *args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate


def require_value_of(value: Any, kind: type, owner: str, argument: str, example: str) -> None:
    """Raise a `TypeError` unless `value` is a `kind`: `owner`'s `argument` takes one `kind`
    value, written like `example` (a number there is an earlier release's positional
    parameter)."""
    if not isinstance(value, kind):
        raise TypeError(
            f"{owner}'s {argument} must be a {kind.__name__}, got {type(value).__name__} "
            f"{value!r}: pass {argument}={example} (earlier releases took these values one by "
            "one, in this place)"
        )
