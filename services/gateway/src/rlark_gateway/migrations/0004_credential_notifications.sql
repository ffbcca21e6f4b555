-- Every gateway replica keeps who holds which credential for a few seconds (credential_cache.py): each
-- change that can end or alter a credential notifies them all at its commit, and they forget what they
-- kept. Statement-level: one notification per statement, whatever it touched. A token's use
-- (last_used_at) is not such a change.
CREATE FUNCTION notify_credential_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rlark_credentials', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;

CREATE TRIGGER users_changed AFTER UPDATE OR DELETE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION notify_credential_change();
CREATE TRIGGER sessions_changed AFTER UPDATE OR DELETE ON sessions
    FOR EACH STATEMENT EXECUTE FUNCTION notify_credential_change();
CREATE TRIGGER api_tokens_changed AFTER UPDATE OF username, token_hash, revoked_at OR DELETE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION notify_credential_change();
