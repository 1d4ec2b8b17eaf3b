"""The JSON shape the Memory Worker speaks, for any attrs class: camelCase keys, absent
optional fields omitted (never ``null``), unknown input keys ignored so an older peer's extra
fields never break a newer one, and no lossy coercion (``"5"`` is not 5, ``true`` is not 1).
A value that does not fit is a ``WireError`` naming the field by its wire name.

``core.records`` builds its converter here for its own classes. cattrs is imported when the
first converter is built: it and the generated functions cost more than the rest of a
command's start.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import cattrs

__all__ = ["WireError", "converter_for", "describe"]


class WireError(ValueError):
    """A wire object that is not a valid record/candidate; the message names the field."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _strict(kind: type, *, allow: tuple[type, ...] = ()) -> Any:
    """Refuse lossy coercions (``"5"`` → 5, ``True`` → 1, ``1.5`` → 1) a peer's bug would hide."""

    def hook(value: Any, _type: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}, got a boolean")
        if not isinstance(value, (kind, *allow)):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return hook


def _float_hook(value: Any, _type: Any) -> float:
    """A float field (``confidence``) as a float whichever way JSON spelled it: ``1`` and
    ``1.0`` are one value, and a SQL store reads either back as ``1.0``, so every store
    keeps and answers the float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)


def converter_for(classes: Iterable[type], enums: Iterable[type[enum.Enum]], *,
                  unstructure: Iterable[tuple[type, Callable[[Any], Any]]] = ()
                  ) -> cattrs.Converter:
    """A converter speaking the wire shape for ``classes`` (attrs classes), with each of
    ``enums`` as its value; ``unstructure`` replaces the generated writer of a class with a
    hand-written one (same keys, same order, the same optionals omitted)."""
    import cattrs
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

    converter = cattrs.Converter(forbid_extra_keys=False)
    converter.register_structure_hook(str, _strict(str))
    converter.register_structure_hook(int, _strict(int))
    converter.register_structure_hook(float, _float_hook)
    converter.register_structure_hook(bool, _strict(bool))
    # A list of words (``keywords``, a sweep's ``ids``) is a JSON array: cattrs would take
    # any iterable, splitting ``"deploy"`` into its letters and a mapping into its keys.
    words = converter.get_structure_hook(tuple[str, ...])

    def words_hook(value: Any, type_: Any) -> tuple[str, ...]:
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return words(value, type_)  # type: ignore[no-any-return]

    converter.register_structure_hook_func(lambda type_: type_ == tuple[str, ...], words_hook)
    for kind in enums:
        converter.register_unstructure_hook(kind, lambda value: value.value)

    for cls in classes:
        fields = attrs.fields(cls)
        unstructure_overrides = {
            f.name: override(rename=_camel(f.name), omit_if_default=f.default is None)
            for f in fields
        }
        structure_overrides = {f.name: override(rename=_camel(f.name)) for f in fields}
        # The overrides go in as ``**kwargs``; mypy matches an unpacked dict against the
        # functions' named flags too, so it cannot tell they are all field overrides.
        converter.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, converter,
                                          **unstructure_overrides)  # type: ignore[arg-type]
        )
        converter.register_structure_hook(
            cls, make_dict_structure_fn(cls, converter,
                                        **structure_overrides)  # type: ignore[arg-type]
        )
    for cls, writer in unstructure:
        converter.register_unstructure_hook(cls, writer)
    return converter


def describe(exc: BaseException) -> str:
    """What a failed conversion says to a peer: each field by its wire path."""
    import cattrs

    if not isinstance(exc, cattrs.BaseValidationError):
        return str(exc)
    messages = cattrs.transform_error(exc, path="$", format_exception=_format_leaf)
    # Paths come out in attribute names; the peer knows the wire's camelCase ones.
    return "; ".join(re.sub(r"\.([a-z0-9_]+)", lambda m: "." + _camel(m.group(1)), message)
                     for message in messages)


def _format_leaf(exc: BaseException, _type: Any) -> str:
    if isinstance(exc, KeyError):
        return "required field missing"
    return str(exc) or type(exc).__name__
