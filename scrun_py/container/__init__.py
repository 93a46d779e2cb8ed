"""One container as the short-lived verbs and the anchor share it on disk: the handle
(record, liveness, one control request), the record's writes (store), the per-container
directory under --root (spool), the status enum, the control-socket protocol and the
JSON codec they use (fastjson).  `state` goes through here on every call: imports stay
lean.  May import base/ only.
"""
