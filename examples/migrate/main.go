// Command migrate runs a release's database migrations once across every
// replica of a service that starts at the same time: each replica calls
// azlease.DoOnce with a key per release, the first to take it runs the
// migrations (pressly/goose, on a SQLite database through modernc.org/sqlite,
// pure Go), and the others wait until they are done, then serve. A replica
// started later finds the release's key done and serves at once; the next
// release's key runs the next migrations.
//
//	go run .                       # 4 replicas on the embedded emulator and a SQLite file
//	go run . -replicas 2 -db /tmp/app.db
//	AZURE_STORAGE_CONNECTION_STRING=... go run . -replicas 1
//
// Without a connection string it serves azlease's embedded emulator on a
// loopback port. The replicas here are goroutines of one process, each with
// a storage client and a database connection of its own; in a deployment
// each replica runs runReplica at start-up.
package main

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

//go:embed migrations/*.sql
var migrations embed.FS

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	replicas := fs.Int("replicas", 4, "how many replicas start at once")
	dbPath := fs.String("db", "", "the SQLite database file (default: one in a new temporary directory)")
	release := fs.String("release", "2026.11.21", "the release being deployed: its migrations run once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *replicas < 1 || *replicas > 50 {
		return errors.New("-replicas must be from 1 to 50")
	}
	if *dbPath == "" {
		dir, err := os.MkdirTemp("", "azlease-migrate-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*dbPath = filepath.Join(dir, "app.db")
	}
	connStr := os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	if connStr == "" {
		srv := azleasetest.New(nil)
		ep, err := srv.Listen("127.0.0.1:0")
		if err != nil {
			return err
		}
		defer srv.Close()
		defer ep.Close()
		connStr = ep.ConnectionString()
		fmt.Fprintf(out, "embedded emulator at %s\n", ep.URL)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make([]error, *replicas)
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	for i := range *replicas {
		wg.Go(func() {
			errs[i] = runReplica(fmt.Sprintf("replica-%d", i+1), connStr, *dbPath, *release, say)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runReplica is a replica's start-up: migrate the database once per
// release, across every replica, then serve.
func runReplica(name, connStr, dbPath, release string, say func(string, ...any)) error {
	cc, err := azlease.ContainerClientFromConnectionString(connStr, "deployments", nil)
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	dir, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// One key per release: a restart of this release finds it done; the
	// next release runs its own migrations. The records of past releases
	// are kept (no Retention): a key whose record was deleted would run
	// again.
	res, err := azlease.DoOnce(ctx, cc, "migrate/"+release, &azlease.DoOnceOptions{Identity: name, PollInterval: 500 * time.Millisecond},
		func(ctx context.Context, tok azlease.Token) error {
			p, err := goose.NewProvider(goose.DialectSQLite3, db, dir)
			if err != nil {
				return err
			}
			results, err := p.Up(ctx)
			if err != nil {
				return err
			}
			say("%s: migrating the database for release %s (epoch %d): %d migrations applied", name, release, tok.Epoch, len(results))
			return nil
		})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var version int64
	if err := db.QueryRowContext(ctx, "SELECT MAX(version_id) FROM goose_db_version").Scan(&version); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	who := res.Status.Holder
	if res.Ran {
		who = "me"
	}
	say("%s: release %s migrated by %s; schema version %d; serving", name, release, who, version)
	return nil
}
