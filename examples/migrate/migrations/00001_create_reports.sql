-- +goose Up
CREATE TABLE reports (
    id      INTEGER PRIMARY KEY,
    name    TEXT NOT NULL,
    created TEXT NOT NULL
);

-- +goose Down
DROP TABLE reports;
