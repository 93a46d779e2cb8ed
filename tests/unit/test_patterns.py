"""Unit tests for scrun_py.patterns: OCI pattern expansion."""

# Expected value first (style.md 7.11) conflicts with SIM300 (yoda); the style guide wins.

from __future__ import annotations

import shlex

import pytest

from scrun_py.patterns import (
    KNOWN_TOKENS,
    NO_TASK_ID,
    NO_TASK_PID,
    PatternValues,
    expand_pattern,
    quote_argv,
    tokens_in,
    unknown_tokens,
)

VALUES = PatternValues(
    args=("echo", "hi there"),
    bundle="/spool/oci-job7-0/task-0",
    env_file="/spool/oci-job7-0/task-0/environment",
    job_id=7,
    spool_dir="/spool/oci-job7-0",
    node_name="vm",
    pid=4242,
    rootfs="/b/rootfs",
    step_id=0,
    task_id=0,
    user="tuser",
    uid=1001,
    workdir="/home/tuser",
)

EXPANSIONS = {
    "%%": "%",
    "%@": "'echo' 'hi there'",
    "%b": "/spool/oci-job7-0/task-0",
    "%e": "/spool/oci-job7-0/task-0/environment",
    "%j": "7",
    "%m": "/spool/oci-job7-0",
    "%n": "vm",
    "%p": "4242",
    "%r": "/b/rootfs",
    "%s": "0",
    "%t": "0",
    "%u": "tuser",
    "%U": "1001",
    "%Z": "/home/tuser",
}


class TestExpandPattern:
    def test_crun_run_pattern(self) -> None:
        """The test cluster's RunTimeRun pattern expands to the expected crun command."""
        pattern = "crun --rootless=true --root=/tmp/ocistate-%u run --bundle %b %n.%u.%j.%s.%t"
        expected = ("crun --rootless=true --root=/tmp/ocistate-tuser run --bundle "
                    "/spool/oci-job7-0/task-0 vm.tuser.7.0.0")
        assert expected == expand_pattern(pattern, VALUES)

    @pytest.mark.parametrize(("token", "expected"), sorted(EXPANSIONS.items()))
    def test_each_token(self, token: str, expected: str) -> None:
        """Every known token expands to its field's value."""
        assert expected == expand_pattern(f"<{token}>", VALUES)[1:-1]

    def test_every_known_token_is_covered(self) -> None:
        """The per-token cases above cover exactly KNOWN_TOKENS."""
        assert set(KNOWN_TOKENS) == set(EXPANSIONS)

    def test_double_percent_is_not_rescanned(self) -> None:
        """``%%u`` is a literal ``%u``, not a percent followed by the user name."""
        assert "%u" == expand_pattern("%%u", VALUES)

    def test_text_without_tokens_is_unchanged(self) -> None:
        """A pattern with no ``%`` comes back as is."""
        assert "crun state x" == expand_pattern("crun state x", VALUES)

    def test_no_task_defaults(self) -> None:
        """Without a task, ``%t`` is -1 and ``%p`` is 4294967295, as in Slurm's cleanup."""
        values = PatternValues(job_id=1, step_id=2, node_name="n", user="u", uid=5)
        assert (NO_TASK_ID, NO_TASK_PID) == (-1, 4294967295)
        assert "-1 4294967295" == expand_pattern("%t %p", values)

    def test_unknown_token_raises(self) -> None:
        """An unknown token raises ValueError naming it."""
        with pytest.raises(ValueError, match="'%x'"):
            expand_pattern("run %x", VALUES)

    def test_trailing_percent_raises(self) -> None:
        """A lone ``%`` at the end of the pattern is an error."""
        with pytest.raises(ValueError, match="lone"):
            expand_pattern("run %", VALUES)


class TestQuoteArgv:
    def test_words_single_quoted(self) -> None:
        """Each word is single-quoted and words are space separated."""
        assert "'a' 'b c' ''" == quote_argv(["a", "b c", ""])

    def test_embedded_single_quote(self) -> None:
        """An embedded ``'`` is written as ``'"'"'``."""
        assert "'it'\"'\"'s'" == quote_argv(["it's"])

    def test_shell_round_trip(self) -> None:
        """The shell splits the quoted string back into the original argv."""
        argv = ["sh", "-c", "echo \"$HOME\" 'x' `id` $(id) \\ ;", "", "a\nb"]
        assert argv == shlex.split(quote_argv(argv))

    def test_empty_argv(self) -> None:
        """No argv (config.json carries it) expands to an empty string."""
        assert "" == quote_argv([])


class TestTokens:
    def test_tokens_in_order_without_repeats(self) -> None:
        """tokens_in lists each distinct token once, in order of first use."""
        assert ["%n", "%u", "%%", "%j"] == tokens_in("%n.%u.%%.%j.%u")

    def test_unknown_tokens(self) -> None:
        """unknown_tokens keeps only what slurmstepd would not expand."""
        assert ["%x", "%h", "%"] == unknown_tokens("%x %u %h %x %")

    def test_known_pattern_has_no_unknown_tokens(self) -> None:
        """A pattern using only known tokens reports nothing."""
        assert [] == unknown_tokens("crun run --bundle %b %n.%u.%j.%s.%t %@ 100%%")

    def test_known_tokens_set(self) -> None:
        """KNOWN_TOKENS is exactly the oci.conf(5) token list."""
        expected = {"%%", "%@", "%b", "%e", "%j", "%m", "%n", "%p", "%r", "%s", "%t", "%u",
                    "%U", "%Z"}
        assert expected == set(KNOWN_TOKENS)
