import type { Migration } from './index'

/**
 * Version 8: revocation by token id and by issue time (src/auth/revocations-postgres.ts), beside the
 * identity revocations of version 6, which stay as they are.
 *
 * `wardline_token_revocations` holds one row per revoked `jti`; `wardline_issued_before_revocations`
 * one row per (tenant, identity) (identity `*`: the whole tenant) whose tokens with an `iat` before
 * `issued_before` are refused. `until` NULL means until removed, as in `wardline_revocations`.
 *
 * Tables of their own rather than a kind column in `wardline_revocations`: that table's primary key
 * (tenant, identity) and every statement written against it (replicas not yet upgraded during a rolling
 * upgrade, operators' own SQL) keep their meaning, and a replica that does not know these kinds never
 * reads them as whole-identity revocations. Both tables move the same version counter through the same
 * trigger function, so a replica still reads one tiny row per refresh.
 */
export const tokenRevocations: Migration = {
  version: 8,
  name: 'revocation by token id and by issue time',
  sql: `
CREATE TABLE wardline_token_revocations (
  jti text PRIMARY KEY,
  until timestamptz,
  reason text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE wardline_issued_before_revocations (
  tenant text NOT NULL,
  identity text NOT NULL,
  issued_before timestamptz NOT NULL,
  until timestamptz,
  reason text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (tenant, identity)
);

CREATE TRIGGER wardline_token_revocations_changed
  AFTER INSERT OR UPDATE OR DELETE ON wardline_token_revocations
  FOR EACH ROW EXECUTE PROCEDURE wardline_revocations_changed();
CREATE TRIGGER wardline_token_revocations_truncated
  AFTER TRUNCATE ON wardline_token_revocations
  FOR EACH STATEMENT EXECUTE PROCEDURE wardline_revocations_changed();
CREATE TRIGGER wardline_issued_before_revocations_changed
  AFTER INSERT OR UPDATE OR DELETE ON wardline_issued_before_revocations
  FOR EACH ROW EXECUTE PROCEDURE wardline_revocations_changed();
CREATE TRIGGER wardline_issued_before_revocations_truncated
  AFTER TRUNCATE ON wardline_issued_before_revocations
  FOR EACH STATEMENT EXECUTE PROCEDURE wardline_revocations_changed();
`,
}
