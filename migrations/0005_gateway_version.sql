-- Gateways also report their build version, so an admin can see a rolling upgrade's progress next to the
-- revision each gateway serves.
ALTER TABLE gateways
    ADD COLUMN version text NOT NULL DEFAULT ''
        CONSTRAINT gateways_version_length CHECK (length(version) <= 100);
