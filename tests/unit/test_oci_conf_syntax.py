"""create's pydantic-free reading of oci.conf: the same settings as the full model, or
None (then the model decides and words the problem)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import pytest

from scrun_py.site.oci_conf import parse_oci_conf
from scrun_py.site.oci_conf_syntax import plain_settings

RUN = ('RunTimeQuery="crun state %n.%u.%j.%s.%t"\n'
       'RunTimeKill="crun kill -a %n.%u.%j.%s.%t"\n'
       'RunTimeDelete="crun delete --force %n.%u.%j.%s.%t"\n'
       'RunTimeRun="crun run --bundle %b %n.%u.%j.%s.%t"\n')
CREATE = ('RunTimeCreate="c create %n" RunTimeStart="c start %n" RunTimeQuery="c state %n"\n'
          'RunTimeKill="c kill %n" RunTimeDelete="c delete %n"\n')


def _from_model(text: str) -> dict[str, object]:
    conf = parse_oci_conf(text)
    return {"runtime_kill": conf.runtime_kill,
            "ignore_file_config_json": conf.ignore_file_config_json,
            "srun_path": conf.srun_path, "srun_args": list(conf.srun_args),
            "stdio_debug": conf.stdio_debug, "file_debug": conf.file_debug,
            "syslog_debug": conf.syslog_debug}


@pytest.mark.parametrize("text", [
    RUN, CREATE, RUN + "# a comment\n\nSrunPath=/opt/slurm/bin/srun\n",
    RUN + "SrunArgs=--mpi=none\nsrunargs=-v\n", RUN + "StdIODebug=Debug2 FileDebug=5\n",
    RUN + "SyslogDebug=quiet\nIgnoreFileConfigJson=no\n",
    "IgnoreFileConfigJson=YES\nRunTimeKill=\"k %n\"\n", RUN + 'RunTimeKill="k2 %n"\n',
])
def test_plain_files_read_as_the_model_reads_them(text: str) -> None:
    """Every setting create hands the anchor is the model's value."""
    assert _from_model(text) == plain_settings(text)


@pytest.mark.parametrize("text", [
    "", RUN + "RunTimeStart=x\n", RUN.replace("RunTimeDelete", "# RunTimeDelete"),
    RUN + "StdIODebug=loud\n", RUN + "IgnoreFileConfigJson=maybe\n",
    RUN + 'RunTimeEnvExclude="^X"\n', RUN + "ContainerPath=/c/%q\n",
    RUN.replace("%b", "%q"), RUN + "SrunPath=a b\n", RUN + "SrunPath=\n",
    RUN + "SrunPath=a\\\n", RUN + "Unknown=1\n", RUN + "DisableHooks=prestart\n",
])
def test_anything_else_goes_to_the_model(text: str) -> None:
    """Other keys, bad values, syntax problems: None (the model accepts or words them)."""
    assert None is plain_settings(text)


# Slurm's Key=Value pair as a regular expression: the oracle match_pair is held to
_PAIR = r'\s*([A-Za-z0-9_.]+)\s*=\s*(?:"([^"]*)"|([^\s"]+))(?=\s|$)'
_PIECES = ["", " ", "\t", "Key", "k.y_1", "=", " = ", '"', '"a b"', "v", "v2", "é", "\u00a0",
           "#", "-", "''", '""', "a=b", "%n.%u"]


def _regex_pair(line: str, pos: int) -> tuple[str, str, int] | None:
    import re

    m = re.compile(_PAIR).match(line, pos)
    if m is None:
        return None
    return m[1], m[2] if m[2] is not None else m[3], m.end()


def _lines() -> list[str]:
    import itertools

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
