// Command rolling is a rolling deploy of an elected service, with planned
// succession: every replica runs an Elector whose Priority is its
// generation, and the replicas are replaced one by one, new one first (as a
// Kubernetes Deployment does), the new one started a moment before the old
// one is stopped. Leadership moves once, straight to the new generation,
// and the leader's work is interrupted only for a fraction of a second:
// the program prints each leader change and the time without a leader.
//
//	go run ./examples/rolling                       # 5 replicas on the embedded emulator
//	go run ./examples/rolling -priority=false       # without priorities: still once, to the newest standby
//	go run ./examples/rolling -no-succession        # as before succession: releases, standbys poll
//	AZURE_STORAGE_CONNECTION_STRING=... go run ./examples/rolling
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rolling:", err)
		os.Exit(1)
	}
}

// journal records who leads, from the leaders' own tasks: when each term's
// work started and stopped.
type journal struct {
	mu      sync.Mutex
	t0      time.Time
	out     io.Writer
	last    string    // who led last
	stopped time.Time // when the last leader's work stopped; zero while someone leads
	changes int
	gap     time.Duration
	during  bool // the deploy is under way: count changes
}

func (j *journal) start(who string, epoch uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := time.Now()
	switch {
	case j.last == "":
		fmt.Fprintf(j.out, "%7.3fs  %s leads (epoch %d)\n", now.Sub(j.t0).Seconds(), who, epoch)
	case j.during:
		gap := now.Sub(j.stopped)
		j.changes++
		j.gap += gap
		fmt.Fprintf(j.out, "%7.3fs  leadership moved from %s to %s (epoch %d) after %v without a leader\n", now.Sub(j.t0).Seconds(), j.last, who, epoch, gap.Round(time.Millisecond))
	}
	j.last, j.stopped = who, time.Time{}
}

// printf writes a line of the story under the journal's lock: the leaders'
// tasks write to the same writer from their own goroutines.
func (j *journal) printf(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	fmt.Fprintf(j.out, format, args...)
}

func (j *journal) stop() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.stopped = time.Now()
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rolling", flag.ContinueOnError)
	replicas := fs.Int("replicas", 5, "replicas to replace")
	poll := fs.Duration("poll", 5*time.Second, "the Electors' PollInterval")
	surgeMin := fs.Duration("surge-min", 1500*time.Millisecond, "the new replica starts at least this long before the old one stops")
	surgeMax := fs.Duration("surge-max", 4*time.Second, "... and at most this long")
	priority := fs.Bool("priority", true, "priority from the generation (the new one higher)")
	noSuccession := fs.Bool("no-succession", false, "turn planned succession off (release on stop, as before)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cc, closeStore, err := containerClient("locks")
	if err != nil {
		return err
	}
	defer closeStore()
	name := fmt.Sprintf("rolling-%08x", rand.Uint32())

	j := &journal{t0: time.Now(), out: out}
	start := func(id string, gen int) (*azlease.Elector, error) {
		opts := &azlease.ElectorOptions{Identity: id, PollInterval: *poll, NoSuccession: *noSuccession,
			Labels: map[string]string{"version": fmt.Sprint(gen)}}
		if *priority {
			opts.Priority = gen
		}
		e, err := azlease.NewElector(cc, name, opts)
		if err != nil {
			return nil, err
		}
		return e, e.Start(context.Background(), func(ctx context.Context, term *azlease.Term) error {
			j.start(id, term.Epoch())
			<-ctx.Done() // the leader's work; it stops at once when asked
			j.stop()
			return nil
		})
	}

	j.printf("%d replicas of generation 1 on %s (poll %v, priority from the generation: %v, succession: %v)\n", *replicas, name, *poll, *priority, !*noSuccession)
	old := make([]*azlease.Elector, *replicas)
	for i := range old {
		if old[i], err = start(fmt.Sprintf("v1-%d", i), 1); err != nil {
			return err
		}
	}
	var all []*azlease.Elector
	all = append(all, old...)
	defer func() {
		for _, e := range all {
			_ = e.Stop(context.Background())
		}
	}()
	for j.leader() == "" {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(*poll + *poll/5) // every replica has published its candidacy
	j.printf("rolling deploy to generation 2, one replica at a time, new one first\n")
	j.begin()
	for i, k := range rand.Perm(*replicas) {
		e, err := start(fmt.Sprintf("v2-%d", i), 2)
		if err != nil {
			return err
		}
		all = append(all, e)
		time.Sleep(*surgeMin + time.Duration(rand.Int64N(int64(*surgeMax-*surgeMin)+1)))
		if err := old[k].Stop(context.Background()); err != nil {
			return err
		}
		j.printf("%7.3fs  replaced v1-%d with v2-%d\n", time.Since(j.t0).Seconds(), k, i)
	}
	time.Sleep(2 * time.Second)
	changes, gap, leader := j.end()
	j.printf("deploy done: %d leader change(s), %v without a leader in all; %s leads\n", changes, gap.Round(time.Millisecond), leader)
	return nil
}

func (j *journal) leader() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last
}

func (j *journal) begin() {
	j.mu.Lock()
	j.during = true
	j.mu.Unlock()
}

func (j *journal) end() (int, time.Duration, string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.during = false
	return j.changes, j.gap, j.last
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
