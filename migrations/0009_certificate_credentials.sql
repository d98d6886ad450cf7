-- A client certificate is a credential too (mutual TLS to a gateway): its digest is the SHA-256 of the
-- certificate's public key (subjectPublicKeyInfo) behind a prefix, so that no password can ever hash to it.
ALTER TABLE credentials
    DROP CONSTRAINT credentials_digest_format,
    ADD CONSTRAINT credentials_digest_format CHECK (digest ~ '^(spki-sha256:)?[0-9a-f]{64}$');
