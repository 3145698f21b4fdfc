-- The hostile schema of the `postgres_hostile` store entry (harness::PgHostile): a role
-- `hostile` owns, in `public` (leader-exec's schema there), overloads of every operator and
-- function name leader-exec's SQL uses and a few more, each of which writes a row into
-- hostile_log.ran (a table the hostile role owns and anyone may insert into) before it answers
-- what pg_catalog's would. The tests assert that table stays empty.
--
-- Every overload is made for each combination of a set of argument types that pg_catalog's
-- resolution accepts (each tried on a query that runs nothing; the answer's type is what pg_catalog gives). Where pg_catalog has no
-- operator or function of exactly those types (`bigint * interval`, `text || integer`,
-- `nextval(text)`), an overload of exactly those types wins over pg_catalog's wherever it sits
-- on search_path: an unqualified name in leader-exec's SQL would run it. Where pg_catalog has one
-- of exactly those types, the overload here wins only while `public` comes before pg_catalog in
-- search_path: so the connecting role's own search_path is `public, pg_catalog`, which every
-- session of leader-exec has until it pins its schema (and which a pooler may keep).
--
-- The schema itself is safe as PostgreSQL 15 makes it (owned by pg_database_owner, CREATE for
-- its owner only): leader-exec's secure-schema check passes it. The hostile role cannot create
-- anything there; its objects are what an upgraded cluster keeps from before
-- `REVOKE CREATE ON SCHEMA public FROM PUBLIC`.
CREATE ROLE hostile NOLOGIN;
CREATE SCHEMA hostile_log AUTHORIZATION hostile;
CREATE TABLE hostile_log.ran (
    what text NOT NULL,
    query text,
    at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
-- A sequence as well: its increments outlive a rollback of the statement that ran the overload.
CREATE SEQUENCE hostile_log.runs;
ALTER TABLE hostile_log.ran OWNER TO hostile;
ALTER SEQUENCE hostile_log.runs OWNER TO hostile;
GRANT USAGE ON SCHEMA hostile_log TO PUBLIC;
GRANT INSERT ON hostile_log.ran TO PUBLIC;
GRANT USAGE ON SEQUENCE hostile_log.runs TO PUBLIC;

DO $gen$
DECLARE
    types text[] := ARRAY['text', 'name', '"char"', 'integer', 'bigint', 'smallint', 'numeric',
        'double precision', 'interval', 'timestamptz', 'boolean', 'oid', 'regclass',
        'regnamespace', 'regrole', 'bytea'];
    ops text[] := ARRAY['||', '*', '+', '-', '/', '=', '<>', '<', '<=', '>', '>=', '~~', '%'];
    -- Functions, by arity: every combination of `types` is tried for each argument.
    fns0 text[] := ARRAY['now', 'current_schema', 'pg_is_in_recovery', 'pg_backend_pid',
        'random', 'clock_timestamp', 'statement_timestamp', 'current_database', 'version'];
    fns1 text[] := ARRAY['nextval', 'currval', 'quote_ident', 'quote_literal', 'to_regclass',
        'to_regrole', 'to_regnamespace', 'hashtext', 'pg_advisory_xact_lock',
        'pg_try_advisory_xact_lock', 'pg_advisory_lock', 'pg_get_userbyid',
        'pg_get_function_identity_arguments', 'chr', 'ceil', 'ceiling', 'floor', 'round',
        'abs', 'length', 'lower', 'upper', 'pg_typeof', 'txid_current', 'pg_notify',
        'extract', 'date_part', 'aclexplode', 'pg_blocking_pids', 'pg_cancel_backend'];
    fns2 text[] := ARRAY['left', 'right', 'starts_with', 'pg_notify', 'setval', 'generate_series',
        'pg_advisory_xact_lock', 'pg_try_advisory_xact_lock', 'pg_has_role', 'has_schema_privilege',
        'extract', 'date_part', 'power', 'div', 'mod', 'strpos', 'position', 'concat',
        'current_setting', 'to_char'];
    fns3 text[] := ARRAY['set_config', 'setval', 'pg_has_role', 'has_schema_privilege', 'substr',
        'generate_series', 'replace'];
    srfs text[] := ARRAY['generate_series', 'aclexplode'];
    n integer := 0;
    op text;
    f text;
    l text;
    r text;
    t text;
    args text[];
    answer regtype;
    shown text;
    item record;
BEGIN
    FOREACH op IN ARRAY ops LOOP
        FOREACH l IN ARRAY types LOOP
            FOREACH r IN ARRAY types LOOP
                BEGIN
                    EXECUTE pg_catalog.format(
                        'SELECT pg_catalog.pg_typeof((SELECT NULL::%s OPERATOR(pg_catalog.%s) NULL::%s WHERE false))',
                        l, op, r) INTO answer;
                EXCEPTION WHEN others THEN
                    CONTINUE;
                END;
                n := n + 1;
                shown := pg_catalog.format('%s %s %s', l, op, r);
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION public.hostile_%s(%s, %s) RETURNS %s LANGUAGE sql AS %L',
                    n, l, r, answer,
                    pg_catalog.format(
                        'INSERT INTO hostile_log.ran (what, query) VALUES (%L, pg_catalog.current_query());
                         SELECT pg_catalog.nextval(''hostile_log.runs''::pg_catalog.regclass);
                         SELECT $1 OPERATOR(pg_catalog.%s) $2', shown, op));
                EXECUTE pg_catalog.format('ALTER FUNCTION public.hostile_%s(%s, %s) OWNER TO hostile',
                    n, l, r);
                EXECUTE pg_catalog.format(
                    'CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = public.hostile_%s)',
                    op, l, r, n);
                EXECUTE pg_catalog.format('ALTER OPERATOR public.%s (%s, %s) OWNER TO hostile',
                    op, l, r);
            END LOOP;
        END LOOP;
    END LOOP;
    -- Functions: argument lists of 0 to 3 types.
    FOR item IN
        SELECT x AS f, ARRAY[]::text[] AS args FROM pg_catalog.unnest(fns0) x
        UNION ALL
        SELECT x, ARRAY[a] FROM pg_catalog.unnest(fns1) x, pg_catalog.unnest(types) a
        UNION ALL
        SELECT x, ARRAY[a, b] FROM pg_catalog.unnest(fns2) x, pg_catalog.unnest(types) a,
            pg_catalog.unnest(types) b
        UNION ALL
        SELECT x, ARRAY[a, b, c] FROM pg_catalog.unnest(fns3) x,
            pg_catalog.unnest(ARRAY['text', 'name', 'bigint', 'integer', 'boolean', 'oid',
                'regclass', 'regrole']) a,
            pg_catalog.unnest(ARRAY['text', 'name', 'bigint', 'integer', 'boolean', 'oid']) b,
            pg_catalog.unnest(ARRAY['text', 'bigint', 'integer', 'boolean']) c
    LOOP
        f := item.f;
        args := item.args;
        t := (SELECT pg_catalog.string_agg(pg_catalog.format('NULL::%s', a), ', ')
              FROM pg_catalog.unnest(args) a);
        BEGIN
            IF f OPERATOR(pg_catalog.=) ANY (srfs) THEN
                EXECUTE pg_catalog.format(
                    'SELECT pg_catalog.pg_typeof((SELECT x FROM pg_catalog.%I(%s) x WHERE false))',
                    f, COALESCE(t, '')) INTO answer;
            ELSE
                EXECUTE pg_catalog.format('SELECT pg_catalog.pg_typeof((SELECT pg_catalog.%I(%s) WHERE false))',
                    f, COALESCE(t, '')) INTO answer;
            END IF;
        EXCEPTION WHEN others THEN
            CONTINUE;
        END;
        IF answer OPERATOR(pg_catalog.=) 'void'::pg_catalog.regtype THEN
            answer := NULL;
        END IF;
        n := n + 1;
        shown := pg_catalog.format('%s(%s)', f, pg_catalog.array_to_string(args, ', '));
        BEGIN
            EXECUTE pg_catalog.format(
                'CREATE FUNCTION public.%I(%s) RETURNS %s%s LANGUAGE sql AS %L',
                f, pg_catalog.array_to_string(args, ', '),
                CASE WHEN f OPERATOR(pg_catalog.=) ANY (srfs) THEN 'SETOF ' ELSE '' END,
                COALESCE(answer::pg_catalog.text, 'void'),
                pg_catalog.format(
                    'INSERT INTO hostile_log.ran (what, query) VALUES (%L, pg_catalog.current_query());
                     SELECT pg_catalog.nextval(''hostile_log.runs''::pg_catalog.regclass);
                     SELECT %s pg_catalog.%I(%s)',
                    shown,
                    CASE WHEN f OPERATOR(pg_catalog.=) ANY (srfs) THEN '* FROM' ELSE '' END,
                    f,
                    (SELECT pg_catalog.string_agg(pg_catalog.format('$%s', i), ', ')
                     FROM pg_catalog.generate_subscripts(args, 1) i)));
            EXECUTE pg_catalog.format('ALTER FUNCTION public.%I(%s) OWNER TO hostile',
                f, pg_catalog.array_to_string(args, ', '));
        EXCEPTION WHEN others THEN
            -- Not a valid SQL function (a pseudo-type answer, say): left out.
            NULL;
        END;
    END LOOP;
END
$gen$;

-- Aggregates: `count(*)` and `max` of the types leader-exec's statements aggregate.
CREATE FUNCTION public.hostile_count(bigint) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO hostile_log.ran (what, query) VALUES ('count(*)', pg_catalog.current_query());
    SELECT pg_catalog.nextval('hostile_log.runs'::pg_catalog.regclass);
    SELECT $1 OPERATOR(pg_catalog.+) 1::pg_catalog.int8 $$;
CREATE AGGREGATE public.count(*) (SFUNC = public.hostile_count, STYPE = bigint, INITCOND = '0');
CREATE FUNCTION public.hostile_max(bigint, bigint) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO hostile_log.ran (what, query) VALUES ('max(bigint)', pg_catalog.current_query());
    SELECT pg_catalog.nextval('hostile_log.runs'::pg_catalog.regclass);
    SELECT GREATEST($1, $2) $$;
CREATE AGGREGATE public.max(bigint) (SFUNC = public.hostile_max, STYPE = bigint);
CREATE FUNCTION public.hostile_max_int(integer, integer) RETURNS integer LANGUAGE sql AS $$
    INSERT INTO hostile_log.ran (what, query) VALUES ('max(integer)', pg_catalog.current_query());
    SELECT pg_catalog.nextval('hostile_log.runs'::pg_catalog.regclass);
    SELECT GREATEST($1, $2) $$;
CREATE AGGREGATE public.max(integer) (SFUNC = public.hostile_max_int, STYPE = integer);
ALTER FUNCTION public.hostile_count(bigint) OWNER TO hostile;
ALTER AGGREGATE public.count(*) OWNER TO hostile;
ALTER FUNCTION public.hostile_max(bigint, bigint) OWNER TO hostile;
ALTER AGGREGATE public.max(bigint) OWNER TO hostile;
ALTER FUNCTION public.hostile_max_int(integer, integer) OWNER TO hostile;
ALTER AGGREGATE public.max(integer) OWNER TO hostile;

-- Types named as pg_catalog's: found only where pg_catalog comes later in search_path.
CREATE TYPE public.text AS (x integer);
CREATE TYPE public.oid AS (x integer);
CREATE TYPE public.regclass AS (x integer);
CREATE TYPE public.name AS (x integer);
ALTER TYPE public.text OWNER TO hostile;
ALTER TYPE public.oid OWNER TO hostile;
ALTER TYPE public.regclass OWNER TO hostile;
ALTER TYPE public.name OWNER TO hostile;

ALTER ROLE postgres SET search_path = public, pg_catalog;

-- What the setup itself ran (its own statements meet the overloads too) is not the tests'.
TRUNCATE hostile_log.ran;
SELECT pg_catalog.setval('hostile_log.runs'::pg_catalog.regclass, 1, false);
