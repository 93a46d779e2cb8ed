"""fastjson: json.loads and json.dumps of what scrun-py reads and writes, without
`import json`.  The parse errors are checked in a fresh interpreter: pytest has imported
json, and CPython's scanner words its errors with json.decoder only when it is loaded."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrun_py.container import fastjson

DOCS = ['{"id": "c1", "n": 3, "ok": true, "none": null, "l": [1, "a"]}', "[]", '"s"', " 7 "]
INVALID = ["{ not json", "", "[1,", '{"a" 1}', "tru", '{"a": 1} x', "\xff"]


def _fresh(code: str) -> tuple[str, str]:
    """stdout and stderr of `code` in a new interpreter (json not imported)."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    return res.stdout.strip(), res.stderr


@pytest.mark.parametrize("doc", DOCS)
def test_loads_as_json(doc: str) -> None:
    assert json.loads(doc) == fastjson.loads(doc)


@pytest.mark.parametrize("obj", [{"a": [1, "b", None, True]}, ["x", {"y": "é"}], "s", 3])
def test_dumps_as_json(obj: object) -> None:
    assert json.dumps(obj, separators=(",", ":")) == fastjson.dumps(obj)


def test_invalid_is_a_value_error_without_json_loaded() -> None:
    """Every invalid document is a ValueError, in a process that never imported json
    (the scanner would otherwise fail with a SystemError)."""
    code = ("import sys\n"
            "from scrun_py.container import fastjson\n"
            "assert 'json' not in sys.modules\n"
            f"for doc in {INVALID!r}:\n"
            "    try:\n"
            "        fastjson.loads(doc)\n"
            "    except ValueError:\n"
            "        continue\n"
            "    raise SystemExit(f'accepted {doc!r}')\n"
            "print('ok')\n")
    assert ("ok", "") == _fresh(code)


def test_broken_config_json_without_json_loaded(tmp_path: Path) -> None:
    """create's bundle reader, as `create` runs it (no json imported): one BundleError."""
    code = ("import os\n"
            "from scrun_py.oci.bundle import load_bundle\n"
            "from scrun_py.base.errors import BundleError\n"
            f"d = {str(tmp_path)!r}\n"
            "open(os.path.join(d, 'config.json'), 'w').write('{ not json')\n"
            "try:\n"
            "    load_bundle(d)\n"
            "except BundleError as exc:\n"
            "    print(str(exc).replace(d, 'B'))\n")
    assert ("bundle B: config.json is not valid JSON: Expecting property name enclosed in "
            "double quotes: line 1 column 3 (char 2)", "") == _fresh(code)
