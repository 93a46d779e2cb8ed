"""The ground every other package stands on: errors, processes and accounts (procs),
threads, logs, signal names, the command-line tables (flags), the names scrun-py writes
(layout) and one invocation's global options (invocation).  Imports the standard
library and base/ only.
"""
