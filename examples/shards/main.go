// Command shards shows azlease's shard balancer on its embedded emulator, in
// real time: three replicas spread 32 shards, a fourth joins, one crashes
// (cut off from storage), one stops cleanly. It prints a timeline: after
// each event, how long the group took to balance again and how many shards
// moved, beside the fewest that could have.
//
//	go run ./examples/shards
//
// It takes about 25 seconds, most of it the crashed replica's leases
// expiring (15 s here; the package's default is 60 s, for cost) before the
// others take its shards.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "shards:", err)
		os.Exit(1)
	}
}

// k is the number of shards.
const k = 32

// ledger records who runs which shard: the work of every replica reports
// to it.
type ledger struct {
	mu     sync.Mutex
	owner  map[string]string                 // shard → replica running it now
	starts int                               // shard starts, all replicas together
	ran    map[string][]azleasetest.Interval // per shard: who ran it, when, under which lease
}

func (l *ledger) work(replica string) shards.Work {
	return func(ctx context.Context, s *shards.Shard) error {
		start := time.Now()
		l.mu.Lock()
		l.owner[s.Name] = replica
		l.starts++
		l.mu.Unlock()
		<-ctx.Done() // real work would consume the shard, checkpointing through s.Term
		end := time.Now()
		if vu := s.Term.ValidUntil(); vu.Before(end) {
			end = vu // it knew it no longer held the shard from then on
		}
		l.mu.Lock()
		if l.owner[s.Name] == replica {
			delete(l.owner, s.Name)
		}
		l.ran[s.Name] = append(l.ran[s.Name], azleasetest.Interval{
			Holder: replica, LeaseID: s.Term.Token().LeaseID, Epoch: s.Term.Epoch(), Start: start, End: end})
		l.mu.Unlock()
		return nil
	}
}

// snapshot is who runs which shard now.
func (l *ledger) snapshot() (map[string]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]string, len(l.owner))
	for s, r := range l.owner {
		m[s] = r
	}
	return m, l.starts
}

func counts(owner map[string]string) map[string]int {
	c := map[string]int{}
	for _, r := range owner {
		c[r]++
	}
	return c
}

func run(ctx context.Context, out io.Writer) error {
	srv := azleasetest.New(nil)
	defer srv.Close()
	names := shards.Numbered(k)
	l := &ledger{owner: map[string]string{}, ran: map[string][]azleasetest.Interval{}}
	groups := map[string]*shards.Group{}
	var live []string
	start := func(id string) error {
		g, err := shards.New(srv.Client(id), "orders", names, &shards.Options{Identity: id,
			LeaseDuration: 15 * time.Second, ListInterval: shards.DefaultPollInterval})
		if err != nil {
			return err
		}
		if err := g.Start(context.WithoutCancel(ctx), l.work(id)); err != nil {
			return err
		}
		groups[id] = g
		live = append(live, id)
		return nil
	}
	defer func() {
		for _, id := range []string{"a", "b", "c", "d"} {
			srv.Heal(id)
		}
		for _, g := range groups {
			_ = g.Stop(context.Background())
		}
	}()
	t0 := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%6.1fs  %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	// settle waits until every shard runs on a live replica with floor or
	// ceil of 32/len(live) each, and reports how long that took and how
	// many shards changed hands (against the fewest that could have).
	settle := func(event string, before map[string]string, gone string) error {
		began := time.Now()
		_, startsBefore := l.snapshot()
		for {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			owner, starts := l.snapshot()
			if balanced(owner, live) {
				took := time.Since(began)
				moved, least := 0, 0
				after := counts(owner)
				for s, r := range before {
					if owner[s] != r {
						moved++
					}
				}
				for r, n := range counts(before) {
					if r == gone {
						least += n
					} else {
						least += max(0, n-after[r])
					}
				}
				say("%s: balanced after %.1fs: %s; %d shards changed hands (the fewest possible: %d), %d shard starts",
					event, took.Seconds(), describe(after, live), moved, least, starts-startsBefore)
				return nil
			}
			if time.Since(began) > time.Minute {
				return fmt.Errorf("%s: not balanced after a minute: %s", event, describe(counts(owner), live))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	say("three replicas start (32 shards)")
	for _, id := range []string{"a", "b", "c"} {
		if err := start(id); err != nil {
			return err
		}
	}
	if err := settle("cold start", map[string]string{}, ""); err != nil {
		return err
	}

	before, _ := l.snapshot()
	say("d joins")
	if err := start("d"); err != nil {
		return err
	}
	if err := settle("d joined", before, ""); err != nil {
		return err
	}

	before, _ = l.snapshot()
	say("b crashes (cut off from storage; its leases expire in 15 s)")
	srv.Partition("b", azleasetest.Blackhole)
	live = slices.DeleteFunc(live, func(id string) bool { return id == "b" })
	if err := settle("b crashed", before, "b"); err != nil {
		return err
	}

	before, _ = l.snapshot()
	say("c stops cleanly")
	live = slices.DeleteFunc(live, func(id string) bool { return id == "c" })
	if err := groups["c"].Stop(ctx); err != nil {
		return err
	}
	delete(groups, "c")
	if err := settle("c stopped", before, "c"); err != nil {
		return err
	}
	for id, g := range groups {
		srv.Heal(id)
		if err := g.Stop(ctx); err != nil {
			return err
		}
		delete(groups, id)
	}
	if err := l.exclusive(srv, names); err != nil {
		return err
	}
	say("checked: no shard ever ran on two replicas at once, and each ran only inside a lease the emulator granted")
	return nil
}

// balanced reports whether every shard runs on a live replica, each with
// floor or ceil of its share.
func balanced(owner map[string]string, live []string) bool {
	if len(owner) != k {
		return false
	}
	c := counts(owner)
	for r := range c {
		if !slices.Contains(live, r) {
			return false
		}
	}
	for _, r := range live {
		if n := c[r]; n != k/len(live) && n != (k+len(live)-1)/len(live) {
			return false
		}
	}
	return true
}

func describe(c map[string]int, live []string) string {
	var parts []string
	for _, r := range live {
		parts = append(parts, fmt.Sprintf("%s %d", r, c[r]))
	}
	return strings.Join(parts, ", ")
}

// exclusive checks, for every shard, who ran it against the emulator's
// grants of its lease: never two at once, never outside a grant.
func (l *ledger) exclusive(srv *azleasetest.Server, names []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range names {
		if err := azleasetest.CheckIntervals(srv.Grants(azleasetest.Container, "orders/shards/"+s), l.ran[s]); err != nil {
			return fmt.Errorf("shard %s: %w", s, err)
		}
	}
	return nil
}
