// Command cron runs a job every 2 seconds in three replicas of a service,
// each with its own robfig/cron scheduler, and each run happens once across
// them: the job calls azlease.DoOnce with a key made of the job's name and
// the period its schedule fired in ("report/20261121T020002Z"), so the first
// replica to take the key runs it, and the others, firing a little later,
// find it done. The keys older than an hour are deleted as the runs go
// (DoOnceOptions.Retention). This is what 'azlease once --per' does from a
// crontab.
//
//	go run .                          # 3 replicas, 5 runs, on the embedded emulator
//	go run . -replicas 5 -ticks 10
//	AZURE_STORAGE_CONNECTION_STRING=... go run . -replicas 1 -ticks 100
//
// Without a connection string it serves azlease's embedded emulator on a
// loopback port. The replicas are goroutines of one process here, each with
// a storage client of its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// The schedule, and its period: the time between two of its runs.
const (
	spec   = "*/2 * * * * *" // every 2 s (robfig/cron with seconds)
	period = 2 * time.Second
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cron:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("cron", flag.ContinueOnError)
	replicas := fs.Int("replicas", 3, "how many replicas run the schedule")
	ticks := fs.Int("ticks", 5, "how many periods to run for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *replicas < 1 || *replicas > 50 || *ticks < 1 {
		return errors.New("-replicas must be from 1 to 50, -ticks at least 1")
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
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	var crons []*cron.Cron
	for i := range *replicas {
		c, err := startReplica(fmt.Sprintf("replica-%d", i+1), connStr, say)
		if err != nil {
			return err
		}
		crons = append(crons, c)
	}
	end := time.Now().Truncate(period).Add(time.Duration(*ticks)*period + period/2)
	time.Sleep(time.Until(end))
	for _, c := range crons {
		<-c.Stop().Done() // waits for running jobs
	}
	return nil
}

// startReplica is a replica's scheduler with the job "report".
func startReplica(name, connStr string, say func(string, ...any)) (*cron.Cron, error) {
	cc, err := azlease.ContainerClientFromConnectionString(connStr, "jobs", nil)
	if err != nil {
		return nil, err
	}
	c := cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))
	_, err = c.AddFunc(spec, func() {
		// The run's key: the start of the period its schedule fired in, by
		// this replica's clock. cron fires at the start of the period, so
		// every replica finds the same one however late it fires in it.
		now := time.Now()
		key := "report/" + now.Truncate(period).UTC().Format("20060102T150405Z")
		// Waiting for another replica's run never outlasts the period.
		ctx, cancel := context.WithTimeout(context.Background(), period)
		defer cancel()
		res, err := azlease.DoOnce(ctx, cc, key, &azlease.DoOnceOptions{
			Identity:     name,
			Retention:    time.Hour,              // delete the keys of runs older than an hour as the runs go
			PollInterval: 100 * time.Millisecond, // look again soon while another replica runs it
		}, func(ctx context.Context, tok azlease.Token) error {
			say("%s: report ran on %s", key, name)
			return nil
		})
		if err != nil {
			say("%s: %s: %v", key, name, err)
			return
		}
		_ = res // res.Ran, or done by res.Status.Holder at res.Status.Time
	})
	if err != nil {
		return nil, err
	}
	c.Start()
	return c, nil
}
