// Command gocron runs a job every 2 seconds in three replicas of a service,
// each with its own go-co-op/gocron scheduler, and each tick runs on one of
// them: gocronlock's Locker keys every run by the job's name and its tick as
// an azlease.DoOnce key, so a replica that fires later finds the tick done
// and skips it (a plain lock would let each one run it in turn).
//
//	go run .                          # 3 replicas, 5 ticks, on the embedded emulator
//	go run . -replicas 5 -ticks 10
//	AZURE_STORAGE_CONNECTION_STRING=... go run . -replicas 1 -ticks 100
//
// Without a connection string it serves azlease's embedded emulator on a
// loopback port. The replicas are goroutines of one process here, started
// 0.3 s apart, each with a storage client of its own; in a service each
// replica builds its scheduler this way.
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

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/gocronlock"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gocron:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("gocron", flag.ContinueOnError)
	replicas := fs.Int("replicas", 3, "how many replicas run the scheduler")
	ticks := fs.Int("ticks", 5, "how many ticks to run for")
	period := fs.Duration("period", 2*time.Second, "the job's period (whole seconds)")
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
	var scheds []gocron.Scheduler
	defer func() {
		for _, s := range scheds {
			_ = s.Shutdown()
		}
	}()
	for i := range *replicas {
		if i > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		s, err := startReplica(fmt.Sprintf("replica-%d", i+1), connStr, *period, say)
		if err != nil {
			return err
		}
		scheds = append(scheds, s)
	}
	// Run for the ticks, then stop between two of them.
	end := time.Now().Truncate(*period).Add(time.Duration(*ticks)**period + *period/2)
	time.Sleep(time.Until(end))
	return nil
}

// startReplica is a replica's scheduler: the job "report", every period,
// once per tick across the replicas.
func startReplica(name, connStr string, period time.Duration, say func(string, ...any)) (gocron.Scheduler, error) {
	cc, err := azlease.ContainerClientFromConnectionString(connStr, "jobs", nil)
	if err != nil {
		return nil, err
	}
	locker, err := gocronlock.NewLocker(cc, &gocronlock.Options{
		Period: period,
		// Each tick's record is deleted an hour after its run.
		Once: &azlease.DoOnceOptions{Identity: name},
	})
	if err != nil {
		return nil, err
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		return nil, err
	}
	_, err = s.NewJob(gocron.DurationJob(period),
		gocron.NewTask(func() {
			say("tick %s: report ran on %s", locker.Tick(time.Now()).Format(time.TimeOnly), name)
		}),
		gocron.WithName("report"),
		locker.StartAt(), // on the ticks: multiples of period since 1970
		gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			if !errors.Is(err, gocronlock.ErrTickDone) && !errors.Is(err, context.Canceled) {
				say("%s: skipped: %v", name, err)
			}
		})),
	)
	if err != nil {
		return nil, err
	}
	s.Start()
	return s, nil
}
