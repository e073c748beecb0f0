import type { Migration } from './index'

/**
 * Version 6: the revocation list shared by every replica (src/auth/revocations-postgres.ts).
 *
 * `wardline_revocations` holds one row per (tenant, identity); identity `*` stands for the whole
 * tenant. `until` NULL means until removed. A row whose `until` has passed no longer applies and is
 * deleted by whichever replica cleans up next.
 *
 * Replicas poll several times a second, so an unchanged list must cost one tiny row:
 * `wardline_revocations_version` is a single-row counter that a trigger moves on with every row
 * written, updated or deleted (and on TRUNCATE), by the gateway or by an operator's own SQL alike. A
 * replica reads the rows again only when the counter differs from the one it last saw. A row-level
 * trigger rather than a statement-level one: a DELETE of expired rows that finds none must not make
 * every replica reload an unchanged list.
 */
export const revocations: Migration = {
  version: 6,
  name: 'revocation list shared by every replica',
  sql: `
CREATE TABLE wardline_revocations (
  tenant text NOT NULL,
  identity text NOT NULL,
  until timestamptz,
  reason text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (tenant, identity)
);

CREATE TABLE wardline_revocations_version (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  version bigint NOT NULL DEFAULT 0
);
INSERT INTO wardline_revocations_version DEFAULT VALUES;

CREATE FUNCTION wardline_revocations_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  UPDATE wardline_revocations_version SET version = version + 1;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER wardline_revocations_changed
  AFTER INSERT OR UPDATE OR DELETE ON wardline_revocations
  FOR EACH ROW EXECUTE PROCEDURE wardline_revocations_changed();
CREATE TRIGGER wardline_revocations_truncated
  AFTER TRUNCATE ON wardline_revocations
  FOR EACH STATEMENT EXECUTE PROCEDURE wardline_revocations_changed();
`,
}
