"""Unit tests for scrun_py.site.oci_conf: parsing, validation, modes and version checks."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from scrun_py.base.errors import ConfigError, OciConfError
from scrun_py.site.oci_conf import OciConf, load_oci_conf, parse_oci_conf
from scrun_py.site.oci_conf_syntax import oci_conf_path

# The run-mode block our 22.05 test cluster uses (docs/oci.conf.md, oci.conf.example).
RUN = """\
RunTimeQuery="crun --rootless=true --root=/tmp/ocistate-%u state %n.%u.%j.%s.%t"
RunTimeKill="crun --rootless=true --root=/tmp/ocistate-%u kill -a %n.%u.%j.%s.%t"
RunTimeDelete="crun --rootless=true --root=/tmp/ocistate-%u delete --force %n.%u.%j.%s.%t"
RunTimeRun="crun --rootless=true --root=/tmp/ocistate-%u run --bundle %b %n.%u.%j.%s.%t"
"""
CREATE_START = """\
RunTimeCreate="runc create %n -b %b"
RunTimeStart="runc start %n"
RunTimeQuery="runc state %n"
RunTimeKill="runc kill -a %n"
RunTimeDelete="runc delete --force %n"
"""


def error_of(text: str, source: str = "oci.conf") -> str:
    with pytest.raises(OciConfError) as info:
        parse_oci_conf(text, source)
    return str(info.value)


class TestSyntax:
    def test_run_block(self) -> None:
        """The test cluster's run-mode block parses with the quotes removed."""
        conf = parse_oci_conf(RUN)
        assert "crun --rootless=true --root=/tmp/ocistate-%u state %n.%u.%j.%s.%t" == (
            conf.runtime_query)

    def test_keys_are_case_insensitive(self) -> None:
        """Keys match in any case."""
        conf = parse_oci_conf(RUN + "srunpath=/opt/srun\nDISABLECLEANUP=yes\n")
        assert ("/opt/srun", True) == (conf.srun_path, conf.disable_cleanup)

    def test_comments_and_blank_lines(self) -> None:
        """Full-line and trailing comments and blank lines are ignored."""
        conf = parse_oci_conf("# header\n\n" + RUN + "   \nSrunPath=/x/srun  # trailing\n")
        assert "/x/srun" == conf.srun_path

    def test_hash_inside_quotes_starts_a_comment(self) -> None:
        """As in Slurm, ``#`` cuts the line even inside quotes, leaving the quote open."""
        assert "oci.conf:5: SrunPath: unterminated or misplaced double quote" == error_of(
            RUN + 'SrunPath="/x/#srun"\n')

    def test_several_pairs_per_line(self) -> None:
        """Several Key=Value pairs on one line are all read."""
        conf = parse_oci_conf(RUN + "SrunPath=/a DisableCleanup=1\n")
        assert ("/a", True) == (conf.srun_path, conf.disable_cleanup)

    def test_spaces_around_equals(self) -> None:
        """Spaces around ``=`` are allowed."""
        assert "/a" == parse_oci_conf(RUN + "SrunPath = /a\n").srun_path

    def test_crlf_line_endings(self) -> None:
        """Windows line endings parse like Unix ones."""
        assert "run" == parse_oci_conf(RUN.replace("\n", "\r\n")).mode

    def test_srun_args_repeat(self) -> None:
        """Each SrunArgs line adds one argument, in order."""
        conf = parse_oci_conf(RUN + "SrunArgs=--mpi=none\nsrunargs=\"--export ALL\"\n")
        assert ["--mpi=none", "--export ALL"] == conf.srun_args

    def test_repeated_key_keeps_last(self) -> None:
        """A repeated scalar key keeps its latest value, as Slurm does."""
        assert "/b" == parse_oci_conf(RUN + "SrunPath=/a\nSrunPath=/b\n").srun_path

    def test_unquoted_value_with_spaces(self) -> None:
        """An unquoted value with spaces names the key that needs quotes."""
        assert "oci.conf:1: RunTimeRun: a value with spaces must be double-quoted" == (
            error_of("RunTimeRun=crun run %b\n"))

    @pytest.mark.parametrize("line", ["SrunPath=", 'SrunPath=""', "SrunPath=   "])
    def test_empty_value(self, line: str) -> None:
        """An empty value is an error."""
        assert "oci.conf:5: SrunPath: empty value" == error_of(RUN + line)

    def test_backslash_rejected(self) -> None:
        """Backslash escapes and continuations are refused rather than guessed."""
        assert ("oci.conf:5: backslash escapes and line continuations are not supported"
                == error_of(RUN + "SrunPath=/a\\\n"))

    def test_operator_rejected(self) -> None:
        """``Key+=Value`` is not oci.conf syntax."""
        assert "oci.conf:5: SrunArgs: '+=' is not supported in oci.conf" == error_of(
            RUN + "SrunArgs+=-v")

    def test_not_a_pair(self) -> None:
        """A line that is not Key=Value is a syntax error quoting the text."""
        assert "oci.conf:1: expected Key=Value, got 'crun'" == error_of("crun\n" + RUN)

    def test_unknown_key(self) -> None:
        """An unknown key is named as written, with its line."""
        assert "oci.conf:5: OCIPattern: unknown key" == error_of(RUN + "OCIPattern=x")


class TestValues:
    def test_defaults(self) -> None:
        """Unset keys take Slurm's defaults."""
        conf = parse_oci_conf(RUN)
        assert ("srun", [], "disabled", False, False, []) == (
            conf.srun_path, conf.srun_args, conf.create_env_file, conf.disable_cleanup,
            conf.ignore_file_config_json, conf.disable_hooks)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [("true", "null"), ("Y", "null"), ("Yes", "null"), ("1", "null"), ("false", "disabled"),
         ("N", "disabled"), ("No", "disabled"), ("0", "disabled"), ("null", "null"),
         ("NEWLINE", "newline"), ("disabled", "disabled")],
    )
    def test_create_env_file(self, value: str, expected: str) -> None:
        """CreateEnvFile accepts the three modes and the legacy booleans."""
        assert expected == parse_oci_conf(RUN + f"CreateEnvFile={value}").create_env_file

    def test_create_env_file_invalid(self) -> None:
        """Any other CreateEnvFile value is rejected with the list of modes."""
        assert "oci.conf:5: CreateEnvFile: must be one of null, newline, disabled" == (
            error_of(RUN + "CreateEnvFile=maybe"))

    @pytest.mark.parametrize(
        ("value", "expected"),
        [("yes", True), ("TRUE", True), ("1", True), ("No", False), ("false", False),
         ("0", False)],
    )
    def test_booleans(self, value: str, expected: bool) -> None:
        """Booleans accept yes/no/true/false/1/0 in any case."""
        assert expected == parse_oci_conf(RUN + f"DisableCleanup={value}").disable_cleanup

    @pytest.mark.parametrize("value", ["on", "y", "2", "enabled"])
    def test_boolean_invalid(self, value: str) -> None:
        """Other boolean spellings are rejected."""
        assert "oci.conf:5: DisableCleanup: must be a boolean: yes, no, true, false, 1 or 0" == (
            error_of(RUN + f"DisableCleanup={value}"))

    @pytest.mark.parametrize(("value", "word"), [
        ("quiet", "quiet"), ("INFO", "info"), ("debug", "debug"), ("debug5", "debug5"),
        ("0", "quiet"), ("2", "error"), ("9", "debug5")])
    def test_debug_levels(self, value: str, word: str) -> None:
        """Debug levels accept Slurm's names in any case and digits, stored as the word."""
        assert word == parse_oci_conf(RUN + f"StdIODebug={value}").stdio_debug

    @pytest.mark.parametrize("key", ["StdIODebug", "SyslogDebug", "FileDebug"])
    def test_debug_level_invalid(self, key: str) -> None:
        """An unknown debug level is rejected for every *Debug key."""
        assert error_of(RUN + f"{key}=loud").startswith(f"oci.conf:5: {key}: must be a debug")

    def test_disable_hooks(self) -> None:
        """DisableHooks splits on commas and canonicalizes OCI hook names."""
        conf = parse_oci_conf(RUN + 'DisableHooks="PreStart, createruntime,poststop"')
        assert ["prestart", "createRuntime", "poststop"] == conf.disable_hooks

    def test_disable_hooks_invalid(self) -> None:
        """An unknown hook type is named."""
        assert error_of(RUN + "DisableHooks=prestart,prestop").startswith(
            "oci.conf:5: DisableHooks: unknown hook type 'prestop'")

    @pytest.mark.parametrize("key", ["EnvExclude", "RunTimeEnvExclude"])
    def test_regex(self, key: str) -> None:
        """Exclude keys keep a valid regex as written."""
        conf = parse_oci_conf(RUN + f'{key}="^(SLURM_CONF|SLURM_CONF_SERVER)="')
        assert "^(SLURM_CONF|SLURM_CONF_SERVER)=" == conf.model_dump(by_alias=True)[key]

    def test_posix_class_regex(self) -> None:
        """A POSIX bracket class compiles without leaking a FutureWarning."""
        assert "^[[:upper:]]+=" == parse_oci_conf(RUN + "EnvExclude=^[[:upper:]]+=").env_exclude

    @pytest.mark.parametrize("key", ["EnvExclude", "RunTimeEnvExclude"])
    def test_regex_invalid(self, key: str) -> None:
        """A regex that does not compile is rejected."""
        assert error_of(RUN + f"{key}=(").startswith(
            f"oci.conf:5: {key}: not a valid regular expression")

    @pytest.mark.parametrize(
        "key", ["ContainerPath", "MountSpoolDir", "RunTimeRun", "RunTimeQuery", "RunTimeKill",
                "RunTimeDelete"])
    def test_unknown_pattern_token(self, key: str) -> None:
        """Pattern keys reject tokens slurmstepd would fatal on."""
        assert f"oci.conf:5: {key}: unknown pattern token '%h'" == error_of(
            RUN + f"{key}=/x/%h")

    def test_known_pattern_tokens(self) -> None:
        """Every known token is accepted in a pattern key."""
        conf = parse_oci_conf(RUN + "ContainerPath=/s/%%%@%b%e%j%m%n%p%r%s%t%u%U%Z")
        assert "/s/%%%@%b%e%j%m%n%p%r%s%t%u%U%Z" == conf.container_path


class TestModes:
    def test_run_mode(self) -> None:
        """RunTimeRun with Kill and Delete is run mode."""
        assert "run" == parse_oci_conf(RUN).mode

    def test_run_mode_query_optional(self) -> None:
        """RunTimeQuery is optional in run mode."""
        text = "\n".join(line for line in RUN.splitlines() if "Query" not in line)
        assert "run" == parse_oci_conf(text).mode

    def test_create_start_mode(self) -> None:
        """The full create/start set is create-start mode."""
        assert "create-start" == parse_oci_conf(CREATE_START).mode

    def test_ignore_config_json_skips_checks(self) -> None:
        """With IgnoreFileConfigJson=true no RunTime* key is required."""
        assert "ignore-config-json" == parse_oci_conf("IgnoreFileConfigJson=true").mode

    def test_ignore_config_json_allows_any_mix(self) -> None:
        """With IgnoreFileConfigJson=true even a run/create mix is accepted, as in Slurm."""
        conf = parse_oci_conf(RUN + 'RunTimeCreate="x"\nIgnoreFileConfigJson=yes')
        assert "ignore-config-json" == conf.mode

    def test_nothing_set(self) -> None:
        """A file without RunTime* keys is rejected, without a line number."""
        assert ("oci.conf: no RunTime* command is set: configure RunTimeRun, RunTimeKill and "
                "RunTimeDelete (or set IgnoreFileConfigJson=true)") == error_of("# empty\n")

    def test_run_mode_incomplete(self) -> None:
        """Run mode names the missing keys."""
        assert "oci.conf:2: RunTimeRun: run mode also needs RunTimeDelete" == error_of(
            'RunTimeKill="k"\nRunTimeRun="r"\n')

    def test_create_start_incomplete(self) -> None:
        """create/start mode needs RunTimeQuery too."""
        text = "\n".join(line for line in CREATE_START.splitlines() if "Query" not in line)
        assert "oci.conf:1: RunTimeCreate: create/start mode also needs RunTimeQuery" == (
            error_of(text))

    def test_both_modes_are_mutually_exclusive(self) -> None:
        """RunTimeRun together with RunTimeStart is rejected as mutually exclusive."""
        message = error_of(RUN + 'RunTimeStart="s"')
        assert message.startswith("oci.conf:4: RunTimeRun: ")
        assert "mutually exclusive" in message

    def test_only_kill_and_delete(self) -> None:
        """Kill and Delete without either mode is the 'mutually exclusive' error."""
        message = error_of('RunTimeKill="k"\nRunTimeDelete="d"\n')
        assert message.startswith("oci.conf:2: RunTimeDelete: needs RunTimeRun")
        assert "mutually exclusive" in message


class TestErrors:
    def test_brief_example_message(self) -> None:
        """The summary is ``file:line: Key: reason`` on one line."""
        text = "\n" * 11 + "CreateEnvFile=maybe\n" + RUN
        assert "oci.conf:12: CreateEnvFile: must be one of null, newline, disabled" == (
            error_of(text))

    def test_key_as_written(self) -> None:
        """The key is quoted with the admin's spelling."""
        assert error_of(RUN + "createENVfile=x").startswith("oci.conf:5: createENVfile: ")

    def test_source_name(self) -> None:
        """``source`` replaces the file name in messages."""
        assert error_of(RUN + "Foo=1", "/etc/slurm/oci.conf").startswith(
            "/etc/slurm/oci.conf:5: Foo")

    def test_first_problem_in_file_order(self) -> None:
        """With several bad values, the earliest line is reported."""
        assert error_of(RUN + "StdIODebug=loud\nCreateEnvFile=x\n").startswith(
            "oci.conf:5: StdIODebug")

    def test_details_attached_as_notes(self) -> None:
        """Every pydantic error rides along as an exception note."""
        with pytest.raises(OciConfError) as info:
            parse_oci_conf(RUN + "StdIODebug=loud\nCreateEnvFile=x\n")
        assert 2 == len(info.value.__notes__)

    def test_error_is_a_config_error(self) -> None:
        """OciConfError is the ConfigError subclass the CLI reports with exit 1."""
        assert issubclass(OciConfError, ConfigError)
        assert 1 == OciConfError.exit_code


class TestModel:
    def test_aliases_are_slurm_keys(self) -> None:
        """Each field's alias is Slurm's canonical key spelling."""
        expected = ["ContainerPath", "CreateEnvFile", "DebugFlags", "DisableCleanup",
                    "DisableHooks", "EnvExclude", "FileDebug", "IgnoreFileConfigJson",
                    "MountSpoolDir", "RunTimeCreate", "RunTimeDelete", "RunTimeEnvExclude",
                    "RunTimeKill", "RunTimeQuery", "RunTimeRun", "RunTimeStart", "SrunArgs",
                    "SrunPath", "StdIODebug", "SyslogDebug"]
        assert expected == [f.alias for f in OciConf.model_fields.values()]

    def test_frozen(self) -> None:
        """A parsed config cannot be modified."""
        conf = parse_oci_conf(RUN)
        with pytest.raises(ValidationError):
            conf.srun_path = "/x"

    def test_extra_forbidden(self) -> None:
        """Direct validation rejects unknown keys too."""
        with pytest.raises(ValidationError):
            OciConf.model_validate({"RunTimeRun": "r", "RunTimeKill": "k",
                                    "RunTimeDelete": "d", "Bogus": "1"})

    def test_populate_by_name(self) -> None:
        """Fields can be given by snake_case name."""
        conf = OciConf.model_validate({"runtime_run": "r", "runtime_kill": "k",
                                       "runtime_delete": "d", "srun_args": "-v"})
        assert ("run", ["-v"]) == (conf.mode, conf.srun_args)


class TestLoad:
    def test_load(self, tmp_path: Path) -> None:
        """load_oci_conf reads and parses a file."""
        path = tmp_path / "oci.conf"
        path.write_text(RUN)
        assert "run" == load_oci_conf(path).mode

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file is a clear OciConfError naming the path."""
        path = tmp_path / "oci.conf"
        with pytest.raises(OciConfError) as info:
            load_oci_conf(path)
        assert str(info.value).startswith(f"oci.conf: not found: {path} (it is read beside ")
        assert str(info.value).endswith("name another slurm.conf with -f or SLURM_CONF)")

    def test_directory(self, tmp_path: Path) -> None:
        """A path that cannot be read is an OciConfError, not an OSError."""
        with pytest.raises(OciConfError, match="cannot read"):
            load_oci_conf(tmp_path)

    def test_not_utf8(self, tmp_path: Path) -> None:
        """A file that is not UTF-8 is an OciConfError."""
        path = tmp_path / "oci.conf"
        path.write_bytes(b"SrunPath=\xff\n")
        with pytest.raises(OciConfError, match="utf-8"):
            load_oci_conf(path)

    def test_errors_name_the_path(self, tmp_path: Path) -> None:
        """Validation errors from a file start with its path and line."""
        path = tmp_path / "oci.conf"
        path.write_text(RUN + "Foo=1\n")
        with pytest.raises(OciConfError) as info:
            load_oci_conf(path)
        assert f"{path}:5: Foo: unknown key" == str(info.value)

    def test_find_next_to_slurm_conf(self) -> None:
        """oci.conf is looked up in slurm.conf's directory."""
        assert "/etc/slurm/oci.conf" == oci_conf_path("/etc/slurm/slurm.conf")
        assert "/etc/slurm/oci.conf" == oci_conf_path(Path("/etc/slurm/slurm.conf"))


class TestSupportedBy:
    def test_run_block_fine_everywhere(self) -> None:
        """The test cluster's block has no problems on 22.05 or 26.05."""
        conf = parse_oci_conf(RUN)
        assert ([], []) == (conf.supported_by((22, 5)), conf.supported_by((26, 5)))

    def test_new_keys_on_22_05(self) -> None:
        """23.02 keys are reported on 22.05 but not on 23.02."""
        conf = parse_oci_conf(RUN + "SrunPath=/s\nEnvExclude=^X=\nIgnoreFileConfigJson=no\n")
        expected = [
            "EnvExclude: unknown to slurm 22.05 (added in 23.02); slurmstepd fatals",
            "IgnoreFileConfigJson: unknown to slurm 22.05 (added in 23.02); slurmstepd fatals",
            "SrunPath: unknown to slurm 22.05 (added in 23.02); slurmstepd fatals",
        ]
        assert (expected, []) == (conf.supported_by((22, 5)), conf.supported_by((23, 2)))

    def test_disable_cleanup_on_22_05(self) -> None:
        """DisableCleanup came with 23.02 too (22.05's slurmstepd knows ContainerPath,
        CreateEnvFile and the RunTime* keys only)."""
        conf = parse_oci_conf(RUN + "DisableCleanup=yes\n")
        assert (["DisableCleanup: unknown to slurm 22.05 (added in 23.02); slurmstepd fatals"],
                []) == (conf.supported_by((22, 5)), conf.supported_by((23, 2)))

    @pytest.mark.parametrize("path", sorted(
        (Path(__file__).resolve().parent / "site_corpus" / "oci").glob("*.conf")),
        ids=lambda p: p.name)
    def test_corpus_fits_its_release(self, path: Path) -> None:
        """Each file of the corpus (named after the Slurm release whose documentation it
        follows) has no problem on that release besides the keys that have no effect."""
        release = tuple(int(part) for part in path.name.split("-")[0].split("."))
        assert 2 == len(release)
        conf = parse_oci_conf(path.read_text(encoding="utf-8"), source=path.name)
        assert [] == [problem for problem in conf.supported_by((release[0], release[1]))
                      if "has no effect" not in problem]

    def test_new_tokens(self) -> None:
        """``%U`` needs 23.02 and ``%Z`` needs 26.05."""
        conf = parse_oci_conf(RUN + 'RunTimeDelete="rm %U %Z"\n')
        assert ["RunTimeDelete: %U unknown to slurm 22.05 (added in 23.02)",
                "RunTimeDelete: %Z unknown to slurm 22.05 (added in 26.05)"] == (
            conf.supported_by((22, 5)))
        assert ["RunTimeDelete: %Z unknown to slurm 25.11 (added in 26.05)"] == (
            conf.supported_by((25, 11)))

    def test_debug_flags_has_no_effect(self) -> None:
        """DebugFlags is accepted but applies to nothing in scrun-py: reported on every
        release that knows the key."""
        conf = parse_oci_conf(RUN + "DebugFlags=Steps,Network\n")
        assert "Steps,Network" == conf.debug_flags
        note = ("DebugFlags: has no effect in scrun-py (its anchor runs no Slurm code "
                "in-process; salloc and srun follow slurm.conf's DebugFlags or "
                "SLURM_DEBUG_FLAGS)")
        assert ([note], [note]) == (conf.supported_by((23, 2)), conf.supported_by((26, 5)))

    def test_escaped_percent_is_not_a_token(self) -> None:
        """``%%U`` is a literal, not the 23.02 ``%U`` token."""
        assert [] == parse_oci_conf(RUN + 'RunTimeDelete="echo %%U"\n').supported_by((22, 5))

    def test_create_start_on_22_05(self) -> None:
        """create/start mode is no problem of a release: 22.05 runs it as the newer ones do
        (doctor's warning about the mode itself holds on every release)."""
        assert [] == parse_oci_conf(CREATE_START).supported_by((22, 5))

    def test_query_required_before_23_02(self) -> None:
        """Run mode without RunTimeQuery is reported before 23.02."""
        text = "\n".join(line for line in RUN.splitlines() if "Query" not in line)
        assert ["RunTimeQuery: required by slurm 22.05 (optional since 23.02)"] == (
            parse_oci_conf(text).supported_by((22, 5)))

    def test_newline_env_file(self) -> None:
        """CreateEnvFile=newline is reported before 23.02."""
        assert ["CreateEnvFile: newline needs slurm 23.02 (slurm 22.05 only knows true/false)"
                ] == parse_oci_conf(RUN + "CreateEnvFile=newline").supported_by((22, 5))

    def test_before_oci_support(self) -> None:
        """Slurm before 21.08 has no OCI support at all."""
        assert ["slurm 20.11 has no OCI container support (added in 21.08)"] == (
            parse_oci_conf(RUN).supported_by((20, 11)))

    def test_disable_hooks_has_no_effect(self) -> None:
        """DisableHooks is reported on every version because slurmstepd ignores it."""
        assert ["DisableHooks: has no effect in slurmstepd (parser bug); hooks stay in "
                "config.json"] == parse_oci_conf(RUN + "DisableHooks=prestart").supported_by(
                    (26, 5))

    def test_ignore_config_json_with_create(self) -> None:
        """create/start with IgnoreFileConfigJson=true is reported: slurmstepd fatals."""
        conf = parse_oci_conf(CREATE_START + "IgnoreFileConfigJson=yes")
        assert ["RunTimeCreate: create/start mode with IgnoreFileConfigJson=true makes "
                "slurmstepd fail every step"] == conf.supported_by((26, 5))
