"""scrun_py.base.records.NamedTuple behaves as typing.NamedTuple does for the record
classes the package defines (mypy checks them against typing's)."""

from __future__ import annotations

import pickle
import typing

import pytest

from scrun_py.base import records


def _make(base: type) -> type:
    class Point(base):  # type: ignore[misc]
        """A point."""

        x: int
        y: int = 0
        tags: list[str] = []  # noqa: RUF012 - as the package's records do

        @property
        def norm1(self) -> int:
            return abs(self.x) + abs(self.y)

        def moved(self, dx: int) -> Point:
            return self._replace(x=self.x + dx)  # type: ignore[no-any-return]

        @classmethod
        def origin(cls) -> Point:
            return cls(0)

    return Point


BASES = [typing.NamedTuple, records.NamedTuple]


@pytest.mark.parametrize("base", BASES, ids=["typing", "records"])
class TestSameAsTyping:
    def test_fields_defaults_and_tuple(self, base: type) -> None:
        point = _make(base)
        p = point(3)
        assert ("x", "y", "tags") == point._fields  # type: ignore[attr-defined]
        assert {"y": 0, "tags": []} == point._field_defaults  # type: ignore[attr-defined]
        assert (3, 0, []) == tuple(p)
        assert isinstance(p, tuple)
        assert point(3, 0, []) == p
        assert "Point(x=3, y=0, tags=[])" == repr(p)

    def test_members(self, base: type) -> None:
        point = _make(base)
        p = point(3, -4)
        assert 7 == p.norm1
        assert point(5, -4) == p.moved(2)
        assert point(0) == point.origin()  # type: ignore[attr-defined]
        assert {"x": 3, "y": -4, "tags": []} == p._asdict()
        assert "A point." == point.__doc__
        assert "Point" == point.__name__
        assert __name__ == point.__module__

    def test_immutable(self, base: type) -> None:
        p = _make(base)(1)
        with pytest.raises(AttributeError):
            p.x = 2

    def test_missing_field(self, base: type) -> None:
        with pytest.raises(TypeError):
            _make(base)()

    def test_default_before_non_default(self, base: type) -> None:
        with pytest.raises(TypeError):
            class Bad(base):  # type: ignore[misc]
                a: int = 0
                b: int


def test_pickles() -> None:
    """A record class defined at module level pickles (its module and name are right)."""
    from scrun_py.anchor.handoff import ProcessInfo

    p = ProcessInfo(args=["true"], terminal=True)
    assert p == pickle.loads(pickle.dumps(p))


def test_protocol_is_a_plain_base() -> None:
    class Reader(records.Protocol):
        def read(self) -> bytes:
            return b""

    assert Reader.__mro__ == (Reader, records.Protocol, object)


@pytest.mark.parametrize("base", BASES, ids=["typing", "records"])
class TestCalls:
    """Construction, _make and _replace fail as typing's records do."""

    def test_by_keyword_and_position(self, base: type) -> None:
        point = _make(base)
        assert point(1, 2, ["a"]) == point(tags=["a"], y=2, x=1) == point(1, tags=["a"], y=2)
        assert point(1, 2) == point._make([1, 2, []])  # type: ignore[attr-defined]

    @pytest.mark.parametrize("args, kwargs", [
        ((1, 2, [], 4), {}), ((1,), {"x": 1}), ((1,), {"z": 1}), ((), {"y": 1})])
    def test_bad_calls(self, base: type, args: tuple[object, ...],
                       kwargs: dict[str, object]) -> None:
        with pytest.raises(TypeError):
            _make(base)(*args, **kwargs)

    def test_make_counts(self, base: type) -> None:
        with pytest.raises(TypeError):
            _make(base)._make([1])  # type: ignore[attr-defined]

    def test_replace_unknown_field(self, base: type) -> None:
        with pytest.raises(ValueError, match="unexpected field names"):
            _make(base)(1)._replace(z=1)

    def test_match_and_no_instance_dict(self, base: type) -> None:
        point = _make(base)
        assert ("x", "y", "tags") == point.__match_args__
        with pytest.raises(AttributeError):
            point(1).other = 2
