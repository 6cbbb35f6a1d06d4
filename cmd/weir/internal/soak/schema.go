package soak

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// soakSchemaMark is the comment by which weir soak knows a schema as its own:
// it puts it on every schema it creates, and drops only a schema that has it.
const soakSchemaMark = "weir soak: scratch schema made by weir soak, which drops and recreates it at its next run"

// prepareSoakSchema makes schema ready for a run: created, with the mark, or,
// when an earlier soak made it (it has the mark), dropped and created again;
// migrated; with the audit tables and the trigger that records every lease
// that leaves the running state. A schema without the mark is refused, even
// empty, even holding tables named as the soak's: the soak drops its schema
// with everything in it, so it must be one the soak made.
func prepareSoakSchema(ctx context.Context, pool *pgxpool.Pool, schema, settings string) error {
	var (
		comment *string
		tables  []string
	)
	err := pool.QueryRow(ctx, `SELECT obj_description(n.oid, 'pg_namespace'),
		coalesce((SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c
			WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f')), '{}')
		FROM pg_namespace n WHERE n.nspname = $1`, schema).Scan(&comment, &tables)
	ident := pgx.Identifier{schema}.Sanitize()
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("look at schema %s: %v", schema, err)
	case comment != nil && *comment == soakSchemaMark:
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			return fmt.Errorf("drop the earlier soak's schema %s: %v", schema, err)
		}
	case len(tables) > 0:
		return fmt.Errorf("schema %s holds tables that weir soak did not make (%s): it lacks the soak's mark, "+
			"and the soak drops its schema at the next run: name another with --schema",
			schema, strings.Join(tables, ", "))
	default:
		return fmt.Errorf("schema %s exists and weir soak did not make it (it lacks the soak's mark), "+
			"and the soak drops its schema at the next run: name one that does not exist with --schema", schema)
	}
	// The schema and its mark come in one transaction, so that a schema
	// without the mark is never the soak's.
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("create schema %s: %v", schema, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return fmt.Errorf("create schema %s: %v", schema, err)
	}
	if _, err := tx.Exec(ctx, "COMMENT ON SCHEMA "+ident+" IS '"+soakSchemaMark+"'"); err != nil {
		return fmt.Errorf("mark schema %s: %v", schema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create schema %s: %v", schema, err)
	}
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := weirmigrate.New(driver).Up(ctx, nil); err != nil {
		return fmt.Errorf("migrate schema %s: %v", schema, err)
	}
	ddl := strings.ReplaceAll(`
CREATE TABLE {s}.soak_run (started_at timestamptz NOT NULL DEFAULT now(), settings jsonb NOT NULL);
CREATE TABLE {s}.soak_exec (
	id bigserial PRIMARY KEY,
	job_id bigint NOT NULL,
	lease_token bigint NOT NULL,
	attempt integer NOT NULL,
	worker text NOT NULL,
	pid integer NOT NULL,
	mode text NOT NULL,
	nonce text NOT NULL,
	started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	ended_at timestamptz,
	result text,
	progress_lease bigint,
	UNIQUE (job_id, lease_token, nonce)
);
CREATE TABLE {s}.soak_lease_end (
	job_id bigint NOT NULL,
	lease_token bigint NOT NULL,
	holder text,
	attempt_before integer NOT NULL,
	attempt_after integer NOT NULL,
	state text NOT NULL,
	released boolean NOT NULL,
	error text,
	expires_at timestamptz,
	at timestamptz NOT NULL
);
CREATE TABLE {s}.soak_promoted (job_id bigint NOT NULL, lease_token bigint NOT NULL, at timestamptz NOT NULL);
CREATE TABLE {s}.soak_fault (kind text NOT NULL, worker text, at timestamptz NOT NULL, until timestamptz, detail text);
CREATE TABLE {s}.soak_worker (
	name text PRIMARY KEY, started_at timestamptz, killed_at timestamptz, sigterm_at timestamptz,
	exit_at timestamptz, final boolean, died boolean, exit_status text, report jsonb
);
CREATE FUNCTION {s}.soak_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.state = 'running' THEN
		INSERT INTO {s}.soak_lease_end VALUES (OLD.id, OLD.lease_token, OLD.attempted_by, OLD.attempt,
			NEW.attempt, NEW.state, NEW.release_count > OLD.release_count,
			CASE WHEN jsonb_array_length(NEW.errors) > jsonb_array_length(OLD.errors)
				THEN NEW.errors -> -1 ->> 'error' END,
			OLD.lease_expires_at, clock_timestamp());
	ELSE
		INSERT INTO {s}.soak_promoted VALUES (NEW.id, NEW.lease_token, clock_timestamp());
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER soak_log AFTER UPDATE ON {s}.weir_job FOR EACH ROW
	WHEN (OLD.state = 'running' AND (NEW.state <> 'running' OR NEW.lease_token <> OLD.lease_token)
		OR OLD.state IN ('retryable', 'scheduled') AND NEW.state = 'available')
	EXECUTE FUNCTION {s}.soak_log();
`, "{s}", ident)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create the audit tables in %s: %v", schema, err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+ident+".soak_run (settings) VALUES ($1)", settings); err != nil {
		return fmt.Errorf("record the run: %v", err)
	}
	return nil
}
