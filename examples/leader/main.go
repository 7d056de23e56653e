// Command leader is a worker service that does its housekeeping only while it
// leads. Run several copies: one leads, the others stand by and take over
// when it stops (SIGTERM, Ctrl-C) or dies.
//
//	AZURE_STORAGE_CONNECTION_STRING=... go run ./examples/leader
//
// Without a connection string it runs alone on azlease's embedded emulator,
// which is enough to watch it lead; -run-for ends it after a while.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, logTo io.Writer) error {
	fs := flag.NewFlagSet("leader", flag.ContinueOnError)
	runFor := fs.Duration("run-for", 0, "stop after this long (0: run until SIGTERM)")
	health := fs.String("health", "", "serve the liveness probe on this address, e.g. 127.0.0.1:8081")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logTo, nil))
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}

	cc, closeStore, err := containerClient("locks")
	if err != nil {
		return err
	}
	defer closeStore()

	elector, err := azlease.NewElector(cc, "housekeeping", &azlease.ElectorOptions{
		HeartbeatTimeout: time.Minute, // the probe fails if housekeeping stalls
		Logger:           log,
	})
	if err != nil {
		return err
	}
	if *health != "" {
		srv := &http.Server{Addr: *health, Handler: elector.HealthHandler(), ReadHeaderTimeout: 5 * time.Second}
		var wg sync.WaitGroup
		wg.Go(func() { _ = srv.ListenAndServe() })
		defer wg.Wait()   // runs second: the server goroutine has returned
		defer srv.Close() // runs first
	}

	// Run blocks until ctx ends, then stops gracefully: the housekeeping
	// context is cancelled, Run waits for it to return, then releases the
	// lease so a standby takes over at its next poll.
	return elector.Run(ctx, func(ctx context.Context, term *azlease.Term) error {
		log.Info("leading: starting housekeeping", "epoch", term.Epoch())
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				log.Info("housekeeping stopped", "why", context.Cause(ctx))
				return nil
			case <-tick.C:
				housekeeping(ctx, log, term.Epoch())
				term.Heartbeat()
			}
		}
	})
}

// housekeeping is the work only the leader does. Anything it writes carries
// the epoch, so that the store can refuse a former leader's late writes.
func housekeeping(ctx context.Context, log *slog.Logger, epoch uint64) {
	log.InfoContext(ctx, "housekeeping", "epoch", epoch)
}

// containerClient connects to AZURE_STORAGE_CONNECTION_STRING, or to an
// embedded emulator when it is not set.
func containerClient(name string) (*container.Client, func(), error) {
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		cc, err := azlease.ContainerClientFromConnectionString(cs, name, nil)
		return cc, func() {}, err
	}
	srv := azleasetest.New(nil)
	cc, err := srv.ContainerClient(name, "")
	return cc, srv.Close, err
}
