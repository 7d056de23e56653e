package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/azlease/azlease/azleasetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestMigrateOncePerRelease: four replicas start at once: one runs the
// release's migrations, all four serve at schema version 2. Started again,
// they find the release migrated; a new release's key runs goose again
// (nothing left to apply).
func TestMigrateOncePerRelease(t *testing.T) {
	srv := azleasetest.New(nil)
	ep, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer ep.Close()
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", ep.ConnectionString())
	db := filepath.Join(t.TempDir(), "app.db")
	deploy := func(release string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run([]string{"-replicas", "4", "-db", db, "-release", release}, &out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return out.String()
	}
	count := func(s, sub string) int { return strings.Count(s, sub) }

	first := deploy("r1")
	if n := count(first, "migrating the database for release r1"); n != 1 {
		t.Errorf("%d replicas migrated:\n%s", n, first)
	}
	if n := count(first, "2 migrations applied"); n != 1 {
		t.Errorf("want 2 migrations applied once:\n%s", first)
	}
	if n := count(first, "schema version 2; serving"); n != 4 {
		t.Errorf("%d replicas serve at version 2:\n%s", n, first)
	}
	if n := count(first, "migrated by me"); n != 1 {
		t.Errorf("%d replicas say they migrated:\n%s", n, first)
	}

	again := deploy("r1")
	if n := count(again, "migrating"); n != 0 {
		t.Errorf("a restart of the release migrated again:\n%s", again)
	}
	if n := count(again, "schema version 2; serving"); n != 4 {
		t.Errorf("%d replicas serve:\n%s", n, again)
	}

	next := deploy("r2")
	if n := count(next, "migrating the database for release r2"); n != 1 || count(next, "0 migrations applied") != 1 {
		t.Errorf("the next release's migration runs once (with nothing to apply):\n%s", next)
	}
}
