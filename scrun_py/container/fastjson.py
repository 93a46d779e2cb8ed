"""JSON through CPython's C scanner and string encoder, without `import json`.

`import json` imports re and enum and is a third of a `state` call; the container
record and the control messages are read and written here instead.  Pure.  Where the
C accelerator is missing, or a value is not one of the plain types written here, the
json module does the work (same result, slower).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"


class _ScanContext:
    """What json's decoder offers its C scanner: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        import json

        return float(json.loads(name))  # NaN, Infinity, -Infinity: as json.loads


def loads(data: bytes | str) -> Any:
    """json.loads of one JSON document: ValueError (or RecursionError, for a document
    nested too deep) for anything else."""
    text = data.decode() if isinstance(data, bytes) else data
    try:
        import _json
    except ImportError:  # pragma: no cover - CPython always has it
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        # typeshed types the context as a scanner: the C code reads only its attributes
        obj, end = _json.make_scanner(_ScanContext())(text, start)  # type: ignore[arg-type]
    except StopIteration:
        raise ValueError("Expecting value") from None
    except SystemError:
        # the scanner words most errors with json.decoder's JSONDecodeError, which it
        # takes from sys.modules: without `import json` it fails this way instead.  An
        # invalid document is the rare case: json parses it again for its error.
        import json

        return json.loads(text)
    if text[end:].strip(_WHITESPACE):
        raise ValueError("Extra data")
    return obj


def _plain(obj: Any) -> str:
    import _json

    if isinstance(obj, str):
        return str(_json.encode_basestring_ascii(obj))
    if obj is None or isinstance(obj, bool):
        return {None: "null", True: "true", False: "false"}[obj]
    if isinstance(obj, int):
        return int.__repr__(obj)
    if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        return "{" + ",".join(f"{_plain(k)}:{_plain(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(_plain(v) for v in obj) + "]"
    raise TypeError(f"{type(obj).__name__} is not written here")


def dumps(obj: Any) -> str:
    """json.dumps(obj, separators=(",", ":"))."""
    try:
        return _plain(obj)
    except (TypeError, ImportError):
        import json

        return json.dumps(obj, separators=(",", ":"))
