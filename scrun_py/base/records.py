"""`NamedTuple` and `Protocol` at run time without importing typing.

The modules the anchor and `create` import take both from here.  mypy reads typing's
classes; at run time a class body with annotated fields becomes a
`collections.namedtuple` with the same fields, defaults, methods and docstring.
typing's own NamedTuple turns every annotation (strings here, with
`from __future__ import annotations`) into a compiled ForwardRef, and typing itself
costs ~2 ms to import: together ~3.5 ms of the ~20 ms the anchor spent importing.  A
Protocol is only read by mypy; at run time it is a plain base class.
"""

from __future__ import annotations

import collections

__all__ = ["NamedTuple", "Protocol"]

# what a class body holds besides its fields and members
_CLASS_KEYS = frozenset({"__module__", "__qualname__", "__annotations__", "__doc__",
                         "__orig_bases__", "__classcell__", "__firstlineno__",
                         "__static_attributes__"})


class _NamedTupleMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, object],
                ) -> type:
        if not bases:  # NamedTuple itself
            return super().__new__(mcs, name, bases, ns)
        annotations = ns.get("__annotations__", {})
        assert isinstance(annotations, dict)
        fields = tuple(annotations)
        defaults = []
        for field in fields:
            if field in ns:
                defaults.append(ns[field])
            elif defaults:
                raise TypeError(f"{name}: non-default field {field!r} follows a default")
        module = str(ns.get("__module__"))
        cls: type = collections.namedtuple(name, fields, defaults=defaults, module=module)  # type: ignore[misc]
        cls.__annotations__ = dict(annotations)
        cls.__qualname__ = str(ns.get("__qualname__", name))
        if ns.get("__doc__"):
            cls.__doc__ = str(ns["__doc__"])
        for key, value in ns.items():
            if key not in _CLASS_KEYS and key not in fields:
                setattr(cls, key, value)
        return cls


class _NamedTuple(metaclass=_NamedTupleMeta):
    """Base of a record class: `class Point(NamedTuple): x: int; y: int = 0`."""


class _Protocol:
    """Base of an interface mypy checks structurally; nothing at run time."""


TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import NamedTuple, Protocol
else:
    NamedTuple, Protocol = _NamedTuple, _Protocol
