-- An abort from cut_over first repairs old from new (what old missed while it was the secondary), in state
-- 'rolling_back', before the route returns to old.
ALTER TABLE tenant_migrations DROP CONSTRAINT tenant_migrations_state;
ALTER TABLE tenant_migrations ADD CONSTRAINT tenant_migrations_state CHECK (state IN (
    'double_write', 'backfilling', 'backfilled', 'verifying', 'verified', 'cut_over', 'rolling_back', 'finished',
    'aborted'));
