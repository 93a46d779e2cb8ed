"""Unit tests for scrun_py.site.patterns: the OCI pattern tokens oci.conf may use."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

from scrun_py.site.patterns import KNOWN_TOKENS, tokens_in, unknown_tokens


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
