-- +goose Up
ALTER TABLE reports ADD COLUMN owner TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE reports DROP COLUMN owner;
