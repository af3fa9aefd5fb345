"""Node telemetry: samplers, prolog/epilog marks, the node-local spool and its flush.

The hooks (``prolog/acme-prolog``, ``epilog/acme-epilog``) only drop mark files;
everything here runs in the long-lived node collector (``sacme collectd``).
"""
