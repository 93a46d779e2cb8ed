"""`NamedTuple` and `Protocol` at run time without importing typing.

The modules the anchor and `create` import take both from here.  mypy reads typing's
classes; at run time a class body with annotated fields becomes a tuple class with the
same fields, defaults, methods and docstring, and the members of
`collections.namedtuple` (`_fields`, `_field_defaults`, `_make`, `_replace`,
`_asdict`, its repr and pickling).  typing's own NamedTuple turns every annotation
(strings here, with `from __future__ import annotations`) into a compiled ForwardRef,
and typing itself is an import the anchor does without (base/lean.py).  Nor is
`collections.namedtuple` used: it compiles a `__new__` from source for every class
(eval; base/lean.py gives the cost); here the
shared `_Record` base holds one `__new__` for all, and a record costs the class
alone.  A Protocol is only read by mypy; at run time it is a plain base class.
"""

from __future__ import annotations

from operator import itemgetter

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["NamedTuple", "Protocol"]

# what a class body holds besides its fields and members
_CLASS_KEYS = frozenset({"__module__", "__qualname__", "__annotations__", "__doc__",
                         "__orig_bases__", "__classcell__", "__firstlineno__",
                         "__static_attributes__"})


class _Record(tuple):  # type: ignore[type-arg]
    """What every record class shares: construction by position or keyword with the
    class's defaults, and namedtuple's members."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _field_defaults: dict[str, object] = {}  # noqa: RUF012 - each record has its own

    def __new__(cls, *args: object, **kwargs: object) -> _Record:
        if kwargs or len(args) != len(cls._fields):
            args = cls._bind(args, kwargs)
        return tuple.__new__(cls, args)

    @classmethod
    def _bind(cls, args: tuple[object, ...], kwargs: dict[str, object]) -> tuple[object, ...]:
        """The values in field order, with the TypeErrors a function's call gives."""
        name, fields = cls.__name__, cls._fields
        if len(args) > len(fields):
            raise TypeError(f"{name}() takes {len(fields)} positional arguments but "
                            f"{len(args)} were given")
        values = list(args)
        for field in fields[len(args):]:
            if field in kwargs:
                values.append(kwargs.pop(field))
            elif field in cls._field_defaults:
                values.append(cls._field_defaults[field])
            else:
                raise TypeError(f"{name}() missing required argument: {field!r}")
        if kwargs:  # what is left names a field given by position, or no field
            key = next(iter(kwargs))
            what = ("got multiple values for argument" if key in fields
                    else "got an unexpected keyword argument")
            raise TypeError(f"{name}() {what} {key!r}")
        return tuple(values)

    @classmethod
    def _make(cls, iterable: Iterable[object]) -> _Record:
        result = tuple.__new__(cls, iterable)
        if len(result) != len(cls._fields):
            raise TypeError(f"expected {len(cls._fields)} arguments, got {len(result)}")
        return result

    def _replace(self, **changes: object) -> _Record:
        result = self._make([changes.pop(f, v) for f, v in zip(self._fields, self, strict=True)])
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return result

    def _asdict(self) -> dict[str, object]:
        return dict(zip(self._fields, self, strict=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(
            f"{f}={v!r}" for f, v in zip(self._fields, self, strict=True)) + ")"

    def __getnewargs__(self) -> tuple[object, ...]:
        return tuple(self)


class _NamedTupleMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, object],
                ) -> type:
        if not bases:  # NamedTuple itself
            return super().__new__(mcs, name, bases, ns)
        annotations = ns.get("__annotations__", {})
        assert isinstance(annotations, dict)
        fields = tuple(annotations)
        defaults: dict[str, object] = {}
        for field in fields:
            if field in ns:
                defaults[field] = ns[field]
            elif defaults:
                raise TypeError(f"{name}: non-default field {field!r} follows a default")
        attrs: dict[str, object] = {
            key: value for key, value in ns.items()
            if key not in _CLASS_KEYS and key not in fields}
        attrs.update({
            "__slots__": (), "__module__": str(ns.get("__module__")),
            "__qualname__": str(ns.get("__qualname__", name)),
            "__doc__": ns.get("__doc__") or f"{name}({', '.join(fields)})",
            "__annotations__": dict(annotations), "__match_args__": fields,
            "_fields": fields, "_field_defaults": defaults})
        for i, field in enumerate(fields):
            attrs[field] = property(itemgetter(i), doc=f"Alias for field number {i}")
        return type(name, (_Record,), attrs)


class _NamedTuple(metaclass=_NamedTupleMeta):
    """Base of a record class: `class Point(NamedTuple): x: int; y: int = 0`."""


class _Protocol:
    """Base of an interface mypy checks structurally; nothing at run time."""


if TYPE_CHECKING:
    from typing import NamedTuple, Protocol
else:
    NamedTuple, Protocol = _NamedTuple, _Protocol
