"""What the site configures, and the checks of it: scrun-py.toml (site_conf) and its
[audit], [policy] and [trust] tables (audit, policy, trust), Slurm's oci.conf
(oci_conf, oci_conf_syntax, patterns) and the settings the verbs take from it
(oci_settings).  May import base/, container/, hooks/ and slurm/; anchor/ and
commands/ import it.
"""
