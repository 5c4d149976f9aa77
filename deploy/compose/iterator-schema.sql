-- The Iterator's default hierarchy (storage/sql/schema.py; tests/unit/test_compose_files.py keeps
-- the two equal), created by the postgres image's init hook in a fresh database. Your own source
-- database replaces it, and [[iterator.levels]] describes it.
CREATE TABLE IF NOT EXISTS enterprise (id BIGINT NOT NULL PRIMARY KEY, deleted SMALLINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS users (id BIGINT NOT NULL PRIMARY KEY, enterprise_id BIGINT NOT NULL, deleted SMALLINT NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS users_by_enterprise ON users (enterprise_id, id, deleted);
CREATE TABLE IF NOT EXISTS file (id BIGINT NOT NULL PRIMARY KEY, user_id BIGINT NOT NULL, deleted SMALLINT NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS file_by_user ON file (user_id, id, deleted);
CREATE TABLE IF NOT EXISTS file_version (id BIGINT NOT NULL PRIMARY KEY, file_id BIGINT NOT NULL, deleted SMALLINT NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS file_version_by_file ON file_version (file_id, id, deleted);
