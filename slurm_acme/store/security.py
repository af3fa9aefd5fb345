"""Row-level security on a shared Postgres store: a user's SQL sees only her rows.

The CLI already narrows what a non-admin sees, but a site hands its users
database credentials, and ``psql`` skips the CLI. So on Postgres every table
carries a policy keyed on the Slurm user, who logs in as a role of the same
name (``current_user``):

* tables with a ``user`` column: the row is hers when ``"user" = current_user``;
* tables hanging off one of those (attempts off runs, samples off jobs, ...):
  the row is hers when its parent row is visible to her (the parent's own
  policy applies inside the policy's subquery);
* cluster-wide aggregates (report and telemetry rollups): no rows for users;
* shared reference tables (schema version, runtime priors, the diagnosis
  corpus and learned rules): no policy.

Admins bypass every policy the way Postgres intends: the tables' owner (who
runs ``sacme db upgrade``), superusers, and roles with ``BYPASSRLS``. Policies
are (re)applied after every migration, so a table a later migration adds is
covered too. On SQLite there are no roles; the file mode guards the store.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from slurm_acme.errors import InputError
from slurm_acme.store.engine import Store, sql_reason
from slurm_acme.store.schema import metadata
from slurm_acme.store.schema.core import meta

log = logging.getLogger(__name__)

POLICY = "acme_rows"
OWNER_COLUMN = "user"

#: Tables whose rows belong to whoever owns their parent row.
VIA_PARENT: dict[str, str] = {
    "attempts": "run_id IN (SELECT run_id FROM runs)",
    "checkpoints": "run_id IN (SELECT run_id FROM runs)",
    "eval_trials": "eval_id IN (SELECT eval_id FROM eval_runs)",
    "eval_results": "eval_id IN (SELECT eval_id FROM eval_runs)",
    "failures": ("(run_id IS NOT NULL AND run_id IN (SELECT run_id FROM runs)) OR EXISTS "
                 "(SELECT 1 FROM jobs j WHERE j.cluster = failures.cluster AND j.job_id = failures.job_id)"),
    "gpu_samples": ("EXISTS (SELECT 1 FROM jobs j WHERE j.cluster = gpu_samples.cluster "
                    "AND j.job_id = gpu_samples.job_id)"),
    "gpu_hourly": ("EXISTS (SELECT 1 FROM jobs j WHERE j.cluster = gpu_hourly.cluster "
                   "AND j.job_id = gpu_hourly.job_id)"),
    "node_samples": ("EXISTS (SELECT 1 FROM jobs j WHERE j.cluster = node_samples.cluster "
                     "AND j.job_id = ANY (string_to_array(node_samples.job_ids, ',')))"),
}
#: Reference data every user shares (read by all; see USER_WRITABLE for writes).
#: The node-health ledger is shared too: every user's supervisor reads it to keep
#: bad nodes out of the next attempt, whoever's job hit them.
SHARED = frozenset({"acme_meta", "eval_priors", "failure_cases", "failure_case_vectors", "failure_rules",
                    "node_events", "node_actions"})
#: Tables users write themselves (submit, supervise, seval, diagnose); the rest
#: (jobs, samples, summaries, rollups) only admins' ingest and collectors write.
USER_WRITABLE = frozenset({"runs", "attempts", "checkpoints", "failures", "eval_runs", "eval_trials",
                           "eval_results", "eval_priors", "failure_cases", "failure_case_vectors",
                           "failure_rules", "node_events"})
#: acme_meta keys remembering the roles granted, so later migrations re-grant them.
GRANT_KEY = "grant:"


def rule_for(table: str) -> str | None:
    """The policy's expression for ``table``; None for a shared table (no policy)."""
    if table in SHARED:
        return None
    if OWNER_COLUMN in metadata.tables[table].c:
        return f'"{OWNER_COLUMN}" = current_user'
    return VIA_PARENT.get(table, "false")  # unknown kinds of rows: admins only


def _quote(conn: Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote_identifier(name)


def apply_row_security(conn: Connection) -> None:
    """Enable RLS with one policy per table (idempotent; a no-op off Postgres)."""
    if conn.dialect.name != "postgresql":
        return
    existing = {r[0] for r in conn.execute(text(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"))}
    existing |= {r[0] for r in conn.execute(text(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind = 'p'"))}
    for table in sorted(metadata.tables):
        if table not in existing:
            continue
        name = _quote(conn, table)
        rule = rule_for(table)
        conn.execute(text(f"DROP POLICY IF EXISTS {POLICY} ON {name}"))
        if rule is None:
            conn.execute(text(f"ALTER TABLE {name} DISABLE ROW LEVEL SECURITY"))
            continue
        conn.execute(text(f"CREATE POLICY {POLICY} ON {name} USING ({rule}) WITH CHECK ({rule})"))
        conn.execute(text(f"ALTER TABLE {name} ENABLE ROW LEVEL SECURITY"))
    for key, kind in conn.execute(text("SELECT key, value FROM acme_meta WHERE key LIKE :p"),
                                  {"p": GRANT_KEY + "%"}).all():
        try:
            with conn.begin_nested():
                _grant(conn, key[len(GRANT_KEY):], admin=kind == "admin")
        except DBAPIError as exc:  # a role dropped since: its grant is moot
            log.warning("store: grant to %s not renewed: %s", key[len(GRANT_KEY):], sql_reason(exc))


def _grant(conn: Connection, role: str, *, admin: bool) -> None:
    quoted = _quote(conn, role)
    conn.execute(text(f"GRANT USAGE ON SCHEMA {_quote(conn, _schema(conn))} TO {quoted}"))
    tables = sorted(metadata.tables)  # the parents only: day partitions get no grant of their own
    present = {r[0] for r in conn.execute(text(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition"))}
    for table in (t for t in tables if t in present):
        name = _quote(conn, table)
        if admin:
            conn.execute(text(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {name} TO {quoted}"))
        elif table in USER_WRITABLE:
            conn.execute(text(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {name} TO {quoted}"))
        else:
            conn.execute(text(f"GRANT SELECT ON {name} TO {quoted}"))
    conn.execute(text(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {_quote(conn, _schema(conn))} "
                      f"TO {quoted}"))


def _schema(conn: Connection) -> str:
    return str(conn.execute(text("SELECT current_schema()")).scalar())


def grant_role(store: Store, role: str, *, admin: bool = False) -> None:
    """Give ``role`` (a Slurm users' group role, or the admins' role) the table
    privileges it needs, now and after every later migration.

    Users' roles read everything their policies let through and write only the
    tables they write themselves; an admin role reads and writes all (it must
    also have ``BYPASSRLS``, which only a superuser can give).
    """
    if store.dialect != "postgresql":
        raise InputError(f"sacme db grant: {store.dialect} has no roles; only a Postgres store has")
    try:
        with store.engine.begin() as conn:
            _grant(conn, role, admin=admin)
            conn.execute(meta.delete().where(meta.c.key == GRANT_KEY + role))
            conn.execute(meta.insert().values(key=GRANT_KEY + role, value="admin" if admin else "user"))
    except DBAPIError as exc:
        raise InputError(f"sacme db grant {role}: {sql_reason(exc)}") from None
