"""The one expansion of oci.conf's RunTimeKill pattern (slurm/argv.py: expand_pattern,
node_pattern_values), which signal_shell_command and node_runtime_command share."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import pytest

from scrun_py.slurm.argv import expand_pattern, node_pattern_values


def test_every_token_becomes_its_node_side_value() -> None:
    values = node_pattern_values(7, 0)
    assert ('crun --root=/run/crun-"$(id -un)" kill "${SLURMD_NODENAME}".'
            '"$(id -un)".7.0.0 "$(id -u)" 100%' ==
            expand_pattern("crun --root=/run/crun-%u kill %n.%u.%j.%s.%t %U 100%%", values))


def test_the_task_can_be_a_shell_word() -> None:
    assert 'c.1."$t"' == expand_pattern("c.%j.%t", node_pattern_values(1, 0, '"$t"'))


def test_text_without_tokens_is_unchanged() -> None:
    assert "crun kill x" == expand_pattern("crun kill x", {})
    assert "" == expand_pattern("", {})


def test_expanded_values_are_not_expanded_again() -> None:
    assert "%j" == expand_pattern("%%j", node_pattern_values(1, 0))


@pytest.mark.parametrize(("pattern", "message"), [
    ("kill %x", "%x"), ("kill %b", "%b"), ("kill x%", "%"), ("%", "%")])
def test_a_token_without_value_is_named(pattern: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        expand_pattern(pattern, node_pattern_values(1, 0))
    assert message == str(info.value)
