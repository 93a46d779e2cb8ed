"""create's pydantic-free reading of oci.conf (`read_fields`) held to the full model:
the same values for every file the model accepts, and None for every file it refuses
(then create goes through the model, which words the problem)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import itertools
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrun_py.base.errors import OciConfError
from scrun_py.site.oci_conf import OciConf, parse_oci_conf
from scrun_py.site.oci_conf_syntax import FIELDS, read_fields, regex_compiles

CORPUS = Path(__file__).resolve().parent / "site_corpus" / "oci"
CORPUS_FILES = sorted(CORPUS.glob("*.conf"))

RUN = ('RunTimeQuery="crun state %n.%u.%j.%s.%t"\n'
       'RunTimeKill="crun kill -a %n.%u.%j.%s.%t"\n'
       'RunTimeDelete="crun delete --force %n.%u.%j.%s.%t"\n'
       'RunTimeRun="crun run --bundle %b %n.%u.%j.%s.%t"\n')
CREATE = ('RunTimeCreate="c create %n" RunTimeStart="c start %n" RunTimeQuery="c state %n"\n'
          'RunTimeKill="c kill %n" RunTimeDelete="c delete %n"\n')
GUIDE_REGEX = "^(SLURM_CONF|SLURM_CONF_SERVER)="

FUZZ = settings(derandomize=True, max_examples=600, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _model(text: str) -> dict[str, Any] | None:
    """The model's fields (`model_dump()`), or None when it refuses the file."""
    try:
        return parse_oci_conf(text).model_dump()
    except OciConfError:
        return None


def _expected(text: str) -> dict[str, Any] | None:
    """What read_fields must return: the model's fields, except None where the model
    refuses the file or a regular expression it keeps is outside the hand-checked
    subset (there the model decides)."""
    model = _model(text)
    if model is None or any(model[name] is not None and not regex_compiles(model[name])
                            for name in ("env_exclude", "runtime_env_exclude")):
        return None
    return model


class TestKeys:
    def test_every_model_key(self) -> None:
        """FIELDS names every key of the model, with the model's field name."""
        assert {f.alias: name for name, f in OciConf.model_fields.items()} == {
            key: name for key, (name, _kind) in FIELDS.items()}

    def test_defaults(self) -> None:
        """A file that sets only the RunTime* keys: the model's defaults for the others."""
        assert parse_oci_conf(RUN).model_dump() == read_fields(RUN)


# Every key with values the model takes, as written (quoted or not) in a file.
VALID: dict[str, list[str]] = {
    "ContainerPath": ["/var/spool/slurmd", '"/var/spool/%n/%j"', "/x/%%y", '"%m %Z %p %U"'],
    "CreateEnvFile": ["null", "Newline", "DISABLED", "true", "y", "Yes", "1", "false", "N",
                      "no", "0"],
    "DebugFlags": ["Steps", '"Steps,Protocol"', "0x1"],
    "DisableCleanup": ["yes", "No", "TRUE", "false", "1", "0"],
    "DisableHooks": ["prestart", '"prestart, poststop"', "PreStart,CREATERUNTIME", ",",
                     "poststop,,startContainer", '" createContainer "'],
    "EnvExclude": [f'"{GUIDE_REGEX}"', "^X", "^SLURM_[[:alnum:]_]*=", '"^(A|B){1,3}$"',
                   "[]a-]", "a.b+c?d*", "()", "x{2,}", "[^]]+"],
    "FileDebug": ["quiet", "Debug2", "7", "0", '" info "', "VERBOSE"],
    "IgnoreFileConfigJson": ["no", "False", "0"],
    "MountSpoolDir": ["/var/run/slurm", '"/run/slurm %t"'],
    "RunTimeEnvExclude": [f'"{GUIDE_REGEX}"', "^(DISPLAY|XAUTHORITY)="],
    "SrunArgs": ["--mpi=none", '"--export ALL"', "-v"],
    "SrunPath": ["/usr/bin/srun", '"/opt/slurm bin/srun"'],
    "StdIODebug": ["error", "5", "debug5"],
    "SyslogDebug": ["fatal", "1", "Debug"],
}
# Values the model refuses.
INVALID: dict[str, list[str]] = {
    "ContainerPath": ["/x/%q", '"a %"', "%"],
    "CreateEnvFile": ["nul", "2", '"yes please"', "on"],
    "DisableCleanup": ["y", "maybe", "2", '" yes"', "on"],
    "DisableHooks": ["prestop", "prestart;poststop", '"prestart poststop"'],
    "EnvExclude": ["(", "[z-a]", "*x", "a{3,2}", "^(A", "a**", "["],
    "FileDebug": ["loud", "debug6", "-1", "11"],
    "IgnoreFileConfigJson": ["maybe", "yes!"],
    "MountSpoolDir": ["/%x"],
    "RunTimeEnvExclude": ["^*", ")"],
    "RunTimeKill": ['"kill %q"'],
    "StdIODebug": ["warning"],
    "SyslogDebug": ["10a"],
}
# Regular expressions the model takes that read_fields leaves to it.
UNSURE = ['"(?i)^x"', "a*?", "a{,2}", "x{}", "x{99999}"]


class TestValues:
    @pytest.mark.parametrize(("key", "value"), [
        (key, value) for key, values in VALID.items() for value in values])
    def test_valid_values(self, key: str, value: str) -> None:
        """Each value the model takes: the model's fields, in the key's capitalizations."""
        for written in (key, key.lower(), key.upper()):
            text = RUN + f"{written}={value}\n"
            assert parse_oci_conf(text).model_dump() == read_fields(text)

    @pytest.mark.parametrize(("key", "value"), [
        (key, value) for key, values in INVALID.items() for value in values])
    def test_invalid_values(self, key: str, value: str) -> None:
        """Each value the model refuses: None (the model words it)."""
        text = RUN + f"{key}={value}\n"
        with pytest.raises(OciConfError):
            parse_oci_conf(text)
        assert None is read_fields(text)

    @pytest.mark.parametrize("value", UNSURE)
    def test_regex_outside_the_subset(self, value: str) -> None:
        """An expression outside the hand-checked subset goes to the model, which takes
        these."""
        text = RUN + f"EnvExclude={value}\n"
        assert "run" == parse_oci_conf(text).mode
        assert None is read_fields(text)


VALID_FILES = [
    RUN, CREATE, RUN.replace("RunTimeQuery", "# RunTimeQuery"),
    "# header\n\n" + RUN + "   \nSrunPath=/x/srun  # trailing\n",
    RUN.replace("\n", "\r\n"), RUN + "SrunPath=/a SrunPath=/b\nsrunpath=/c\n",
    RUN + 'SrunArgs=--mpi=none\nsrunargs="--export ALL"\n',
    RUN + 'EnvExclude="(?i)x"\nenvexclude=^Y\n', RUN + 'EnvExclude="^(A" EnvExclude=^B\n',
    "IgnoreFileConfigJson=YES\n", 'IgnoreFileConfigJson=1\nRunTimeKill="k %n"\n',
    'IgnoreFileConfigJson=true RunTimeRun="x %@" RunTimeCreate="y"\n',
    RUN + "\tFileDebug = 3\t\n", RUN + 'DebugFlags="x"\n', RUN + "FileDebug=loud FileDebug=2\n",
]
INVALID_FILES = [
    "", "# nothing\n", RUN + "RunTimeStart=x\n", RUN.replace("RunTimeDelete", "# X"),
    CREATE.replace("RunTimeQuery", "Unknown"), CREATE + 'RunTimeRun="r"\n',
    RUN + "Unknown=1\n", RUN + "SrunPath=a b\n", RUN + "SrunPath=\n", RUN + 'SrunPath=""\n',
    RUN + "SrunPath=a\\\n", RUN + 'SrunPath="/x/#srun"\n', RUN + "SrunPath+=x\n",
    RUN + 'SrunPath=a"b\n', RUN + "garbage\n", RUN + 'EnvExclude=^B EnvExclude="^(A"\n',
    RUN + "FileDebug=2 FileDebug=loud\n", RUN + "OCIPattern=%n\n",
    # Slurm's guide up to 24.11 spells Singularity's keys OCIRunTime*: not keys
    'OCIRunTimeQuery="sudo singularity oci state %n.%u.%j.%s.%t"\n'
    'OCIRunTimeCreate="sudo singularity oci create --bundle %b %n.%u.%j.%s.%t"\n',
]


class TestFiles:
    @pytest.mark.parametrize("text", VALID_FILES, ids=[f"valid{i}" for i, _ in
                                                       enumerate(VALID_FILES)])
    def test_valid_files(self, text: str) -> None:
        """Comments, blank lines, CRLF, several pairs per line, repeated keys (the last
        counts, SrunArgs collects), the modes: the model's fields."""
        assert parse_oci_conf(text).model_dump() == read_fields(text)

    @pytest.mark.parametrize("text", INVALID_FILES, ids=[f"invalid{i}" for i, _ in
                                                         enumerate(INVALID_FILES)])
    def test_invalid_files(self, text: str) -> None:
        """Files the model refuses: None."""
        with pytest.raises(OciConfError):
            parse_oci_conf(text)
        assert None is read_fields(text)

    @pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
    def test_corpus(self, path: Path) -> None:
        """Slurm's documented examples and the site files of tests/unit/site_corpus are
        read without the model, with the model's values."""
        text = path.read_text(encoding="utf-8")
        fields = read_fields(text)
        assert None is not fields
        assert parse_oci_conf(text).model_dump() == fields

    def test_corpus_is_there(self) -> None:
        assert len(CORPUS_FILES) >= 20


# ---- the property: any file built of oci.conf's pieces ------------------------------------

# the modes' keys: complete (the first five), then not
MODE_BLOCKS: list[list[tuple[str, str]]] = [
    [("RunTimeRun", '"r %b"'), ("RunTimeKill", "k"), ("RunTimeDelete", "d")],
    [("RunTimeRun", '"r %b"'), ("RunTimeKill", "k"), ("RunTimeDelete", "d"),
     ("RunTimeQuery", "q")],
    [("RunTimeCreate", "c"), ("RunTimeStart", "s"), ("RunTimeQuery", "q"),
     ("RunTimeKill", "k"), ("RunTimeDelete", "d")],
    [("IgnoreFileConfigJson", "true")],
    [("IgnoreFileConfigJson", "true"), ("RunTimeRun", '"x %@"'), ("RunTimeKill", "k")],
    [("RunTimeRun", '"r %b"'), ("RunTimeKill", "k")],
    [("RunTimeRun", "r"), ("RunTimeCreate", "c"), ("RunTimeStart", "s"),
     ("RunTimeQuery", "q"), ("RunTimeKill", "k"), ("RunTimeDelete", "d")],
    [("RunTimeCreate", "c"), ("RunTimeStart", "s"), ("RunTimeKill", "k"),
     ("RunTimeDelete", "d")],
    [("RunTimeQuery", "q")],
    [],
]
_PATTERN_VALUES = (["p", '"p %n %j"', "%%"], ["%q", '"x %"'])
# per key: values the model takes, and values it refuses (or leaves read_fields unsure)
VALUES: dict[str, tuple[list[str], list[str]]] = {
    key: (VALID.get(key, []), INVALID.get(key, [])) for key in FIELDS}
for _key in FIELDS:
    if _key.startswith("RunTime") and _key != "RunTimeEnvExclude":
        VALUES[_key] = _PATTERN_VALUES
VALUES["EnvExclude"] = (VALID["EnvExclude"], INVALID["EnvExclude"] + UNSURE)
VALUES["RunTimeEnvExclude"] = (VALID["RunTimeEnvExclude"] + VALID["EnvExclude"],
                               INVALID["RunTimeEnvExclude"] + INVALID["EnvExclude"] + UNSURE)
VALUES["IgnoreFileConfigJson"] = (VALID["IgnoreFileConfigJson"] + ["yes", "TRUE"],
                                  INVALID["IgnoreFileConfigJson"])
VALUES["DebugFlags"] = (VALID["DebugFlags"], [])
VALUES["SrunArgs"] = (VALID["SrunArgs"], [])
VALUES["SrunPath"] = (VALID["SrunPath"], [])
EQUALS = ["=", " = ", "= ", "\t="]
# pieces that break a line: not Key=Value, an empty or unquoted value with a space, ...
JUNK = ["garbage", "Unknown=1", "SrunPath=", 'SrunPath=""', "SrunPath+=x", "SrunPath=a\\",
        'SrunPath="open', 'SrunPath=a"b', "=x", "OCIPattern=%n", "SrunPath = a b"]


def _cased(draw: st.DrawFn, key: str) -> str:
    """`key` as written: Slurm's spelling, lower, upper, or any mix of cases."""
    how = draw(st.sampled_from(["as is", "lower", "upper", "mixed"]))
    if how == "lower":
        return key.lower()
    if how == "upper":
        return key.upper()
    if how == "mixed":
        flips = draw(st.lists(st.booleans(), min_size=len(key), max_size=len(key)))
        return "".join(c.swapcase() if flip else c for c, flip in zip(key, flips, strict=True))
    return key


@st.composite
def oci_files(draw: st.DrawFn) -> str:
    """A file: a mode block and more keys with valid, invalid or unsure values, in any
    order and case, on lines of one or more pairs, with comments, blank lines, junk."""
    pairs = list(draw(st.sampled_from(MODE_BLOCKS[:5] * 3 + MODE_BLOCKS[5:])))
    for key in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=6)):
        pairs.append((key, draw(st.sampled_from(VALUES[key][0]))))
    if draw(st.booleans()):  # one value the model refuses, or leaves read_fields unsure of
        key = draw(st.sampled_from(sorted(key for key in FIELDS if VALUES[key][1])))
        pairs.append((key, draw(st.sampled_from(VALUES[key][1]))))
    pairs = draw(st.permutations(pairs))
    items = [f"{_cased(draw, key)}{draw(st.sampled_from(EQUALS))}{value}"
             for key, value in pairs]
    if draw(st.integers(0, 9)) == 0:
        items.insert(draw(st.integers(0, len(items))), draw(st.sampled_from(JUNK)))
    lines: list[str] = []
    i = 0
    while i < len(items):
        width = draw(st.integers(1, 3))
        sep = draw(st.sampled_from([" ", "  ", "\t"]))
        line = sep.join(items[i:i + width])
        i += width
        line = draw(st.sampled_from(["", " ", "\t"])) + line + draw(st.sampled_from(
            ["", " ", "  # a comment", "#x=y", "\t# Key=Value"]))
        lines.append(line)
        if draw(st.integers(0, 4)) == 0:
            lines.append(draw(st.sampled_from(["", "# comment", "   ", "#RunTimeRun=x"])))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(lines) + draw(st.sampled_from(["", newline]))


def test_read_fields_agrees_with_the_model() -> None:
    """For any file: the model's fields where it accepts the file (unless a regular
    expression it keeps is outside the hand-checked subset), else None; and the files
    generated include many of each (else the property proves little)."""
    seen = {"read": 0, "left to the model": 0}

    @FUZZ
    @given(oci_files())
    def agree(text: str) -> None:
        fields = read_fields(text)
        assert _expected(text) == fields
        seen["read" if fields is not None else "left to the model"] += 1

    agree()
    assert min(seen.values()) > 150, seen


# ---- regex_compiles: never True for an expression re refuses ------------------------------

def _compiles(pattern: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except (re.error, OverflowError, RecursionError):
        return False
    return True


REGEX_ALPHABET = "^$|()[]-*+?{},.a:z0123"
SHORT_ALPHABET = "^|()[]-*?{}a1,"


def test_regex_compiles_short_expressions() -> None:
    """Every expression of up to 3 characters of the alphabet, and of 4 of a smaller
    one: True only where re compiles it, and for most of those that re compiles."""
    accepted = compiled = 0
    patterns = ["".join(chars) for n in range(4)
                for chars in itertools.product(REGEX_ALPHABET, repeat=n)]
    patterns += ["".join(chars) for chars in itertools.product(SHORT_ALPHABET, repeat=4)]
    for pattern in patterns:
        ok = _compiles(pattern)
        if regex_compiles(pattern):
            assert ok, pattern
            accepted += 1
        compiled += ok
    assert accepted > compiled // 2, (accepted, compiled)


@FUZZ
@given(st.lists(st.sampled_from([*REGEX_ALPHABET, "[[:alpha:]]", "{2}", "{1,3}", "{3,}",
                                 "{10000}", "{3,2}", "(?", "\\", "é", " ", "=", "SLURM_"]),
                max_size=24))
def test_regex_compiles_longer_expressions(pieces: list[str]) -> None:
    """Longer expressions from pieces: never True where re refuses."""
    pattern = "".join(pieces)
    if regex_compiles(pattern):
        assert _compiles(pattern), pattern


@pytest.mark.parametrize("pattern", [
    GUIDE_REGEX, "^SLURM_[[:alnum:]_]*=", "^(HOME|PATH)=.*$", "^X{1,3}=", "[]a]", "[^]a]",
    "[a-]", "[--z]", "(a|)", "|", "()*", "((((a))))+", "a{2}", "x}", "]"])
def test_regex_compiles_takes_plain_expressions(pattern: str) -> None:
    assert regex_compiles(pattern)
    assert _compiles(pattern)


@pytest.mark.parametrize("pattern", [
    "(", ")", "*", "^*", "$?", "a**", "a*?", "a{3,2}", "a{,2}", "{1}", "[z-a]", "[", "[]",
    "[^]", "(?i)x", "\\d", "a{99999}", "(" * 17 + ")" * 17, "[a-\\]"])
def test_regex_compiles_refuses(pattern: str) -> None:
    """Errors, and what it leaves to re (lazy quantifiers, "(?", escapes, deep nesting)."""
    assert not regex_compiles(pattern)


# ---- match_pair: Slurm's Key=Value pair, by hand ------------------------------------------

# Slurm's Key=Value pair as a regular expression: the oracle match_pair is held to
_PAIR = r'\s*([A-Za-z0-9_.]+)\s*=\s*(?:"([^"]*)"|([^\s"]+))(?=\s|$)'
_PIECES = ["", " ", "\t", "Key", "k.y_1", "=", " = ", '"', '"a b"', "v", "v2", "é", "\u00a0",
           "#", "-", "''", '""', "a=b", "%n.%u"]


def _regex_pair(line: str, pos: int) -> tuple[str, str, int] | None:
    m = re.compile(_PAIR).match(line, pos)
    if m is None:
        return None
    return m[1], m[2] if m[2] is not None else m[3], m.end()


def _lines() -> list[str]:
    out = []
    for n in (1, 2, 3, 4):
        for combo in itertools.product(_PIECES, repeat=n):
            out.append("".join(combo))
    return out


def test_match_pair_reads_as_the_regular_expression() -> None:
    """By hand, the same pairs as the expression: every line of up to four pieces, at
    every position."""
    from scrun_py.site.oci_conf_syntax import match_pair

    checked = 0
    for line in _lines():
        for pos in range(len(line) + 1):
            assert _regex_pair(line, pos) == match_pair(line, pos), (line, pos)
            checked += 1
    assert checked > 100_000
