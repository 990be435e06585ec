"""An audit of the dispatchers' writes on a shared PostgreSQL store, for tests: triggers on
dispatch.deliveries and dispatch.shard_cursors record in public.audit every row written by a
dispatcher session (named by its setting nh.dispatcher) that did not hold that shard's lease when
it wrote. A write rolled back takes its audit rows with it, so what stays was committed. Deleting a
closed delivery (a purge) is housekeeping, not a shard's work, and is not audited. Apply AUDIT
once the dispatcher has made its schema; AUDIT_ROWS lists what was found."""

AUDIT = """
CREATE TABLE public.audit (at timestamptz NOT NULL DEFAULT clock_timestamp(), tbl text, op text, shard int, writer text, holder text);
CREATE FUNCTION public.audit_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  s int;
  w text := current_setting('nh.dispatcher', true);
  h text;
BEGIN
  IF TG_OP = 'DELETE' THEN
    -- A purge of closed deliveries is housekeeping, not a shard's work.
    IF OLD.acked_at IS NOT NULL THEN RETURN OLD; END IF;
    s := OLD.shard;
  ELSE
    s := NEW.shard;
  END IF;
  SELECT owner INTO h FROM dispatch.leases WHERE shard = s;
  IF h IS DISTINCT FROM w THEN
    INSERT INTO public.audit (tbl, op, shard, writer, holder) VALUES (TG_TABLE_NAME, TG_OP, s, w, h);
  END IF;
  RETURN COALESCE(NEW, OLD);
END $$;
CREATE TRIGGER audit_deliveries AFTER INSERT OR UPDATE OR DELETE ON dispatch.deliveries FOR EACH ROW EXECUTE FUNCTION public.audit_dispatch();
CREATE FUNCTION public.audit_cursor() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  w text := current_setting('nh.dispatcher', true);
  h text;
BEGIN
  SELECT owner INTO h FROM dispatch.leases WHERE shard = NEW.shard;
  IF h IS DISTINCT FROM w THEN
    INSERT INTO public.audit (tbl, op, shard, writer, holder) VALUES (TG_TABLE_NAME, TG_OP, NEW.shard, w, h);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER audit_cursors AFTER UPDATE ON dispatch.shard_cursors FOR EACH ROW EXECUTE FUNCTION public.audit_cursor();
"""

AUDIT_ROWS = "SELECT tbl, op, shard, writer, holder FROM public.audit ORDER BY at"
