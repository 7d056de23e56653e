package azlease_test

// What waiting costs, before and after waiters looked before acquiring
// (issue 19 item 4), measured side by side in one run: requests and failed
// requests per waiter-minute while the lock is held, Lock's handoff time and
// an Elector's failover. `make bench` writes the table into
// bench/results.md (AZLEASE_WAIT_REPORT).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/timing"
)

// waitLatency is how long each of the waiter's requests takes in the
// handoff and failover measurements: a request to a storage account in the
// same region, so that an extra round trip shows.
const waitLatency = 10 * time.Millisecond

// pollLoop runs try every poll (± 20 %, as the library jitters) until it
// reports done or ctx ends: the waiting loop of the code before issue 19.
func pollLoop(ctx context.Context, poll time.Duration, try func() bool) {
	for ctx.Err() == nil {
		if try() {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(timing.Jitter(poll, 0.2, rand.Float64())):
		}
	}
}

// oldClaim is Claim before issue 19: a TryLock per name, in order (an
// Unordered one: a fair TryLock reads before it acquires, which the old
// one did not).
func oldClaim(ctx context.Context, cc *container.Client, names []string) *azlease.Lock {
	for _, name := range names {
		m, err := azlease.NewMutex(cc, name, unordered)
		if err != nil {
			panic(err)
		}
		if l, ok, _ := m.TryLock(ctx); ok {
			return l
		}
	}
	return nil
}

// waiterKind is one kind of waiter: hold makes the lock busy (from other
// clients), and wait waits on cc until it acquires or ctx ends, the old way
// or the new.
type waiterKind struct {
	name string
	poll time.Duration
	// unchanged: this waiter already looked before acquiring; old and new
	// are the same code.
	unchanged bool
	hold      func(t *testing.T, e *emu) (release func())
	wait      func(ctx context.Context, cc *container.Client, old bool)
}

func waiterKinds() []waiterKind {
	ctx := context.Background()
	semaphore := func(n int) waiterKind {
		return waiterKind{
			name: fmt.Sprintf("Semaphore.Acquire, n = %d", n), poll: time.Second,
			hold: func(t *testing.T, e *emu) func() {
				var locks []*azlease.Lock
				for i := range n {
					l, ok, err := newSemaphore(t, e, fmt.Sprintf("h%d", i), "sem", n, nil).TryAcquire(ctx)
					require.NoError(t, err)
					require.True(t, ok)
					locks = append(locks, l)
				}
				return func() {
					for _, l := range locks {
						_ = l.Unlock(ctx)
					}
				}
			},
			wait: func(ctx context.Context, cc *container.Client, old bool) {
				s, _ := azlease.NewSemaphore(cc, "sem", n, unordered)
				if !old {
					if l, err := s.Acquire(ctx); err == nil {
						_ = l.Unlock(context.Background())
					}
					return
				}
				pollLoop(ctx, time.Second, func() bool {
					l, ok, _ := s.TryAcquire(ctx)
					if ok {
						_ = l.Unlock(context.Background())
					}
					return ok
				})
			},
		}
	}
	jobs := make([]string, 8)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("jobs/%d", i)
	}
	return []waiterKind{
		{
			name: "Mutex.Lock", poll: time.Second,
			hold: func(t *testing.T, e *emu) func() {
				l, ok, err := newMutex(t, e, "h", "job", nil).TryLock(ctx)
				require.NoError(t, err)
				require.True(t, ok)
				return func() { _ = l.Unlock(ctx) }
			},
			wait: func(ctx context.Context, cc *container.Client, old bool) {
				m, _ := azlease.NewMutex(cc, "job", unordered)
				if !old {
					if l, err := m.Lock(ctx); err == nil {
						_ = l.Unlock(context.Background())
					}
					return
				}
				pollLoop(ctx, time.Second, func() bool {
					l, ok, _ := m.TryLock(ctx)
					if ok {
						_ = l.Unlock(context.Background())
					}
					return ok
				})
			},
		},
		semaphore(2),
		semaphore(8),
		{
			name: "Claim over 8 names, every second", poll: time.Second,
			hold: func(t *testing.T, e *emu) func() {
				var locks []*azlease.Lock
				for _, name := range jobs {
					l, ok, err := newMutex(t, e, "h", name, nil).TryLock(ctx)
					require.NoError(t, err)
					require.True(t, ok)
					locks = append(locks, l)
				}
				return func() {
					for _, l := range locks {
						_ = l.Unlock(ctx)
					}
				}
			},
			wait: func(ctx context.Context, cc *container.Client, old bool) {
				pollLoop(ctx, time.Second, func() bool {
					var l *azlease.Lock
					if old {
						l = oldClaim(ctx, cc, jobs)
					} else {
						_, l, _ = azlease.Claim(ctx, cc, jobs, nil)
					}
					if l != nil {
						_ = l.Unlock(context.Background())
					}
					return l != nil
				})
			},
		},
		{
			name: "DoOnce", poll: 2 * time.Second, unchanged: true,
			hold: func(t *testing.T, e *emu) func() {
				running, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
				go func() {
					defer close(done)
					_, err := azlease.DoOnce(ctx, e.client("h"), "migrate", nil, func(context.Context, azlease.Token) error {
						close(running)
						<-stop
						return nil
					})
					assert.NoError(t, err)
				}()
				<-running
				return func() { close(stop); <-done }
			},
			wait: func(ctx context.Context, cc *container.Client, _ bool) {
				_, _ = azlease.DoOnce(ctx, cc, "migrate", nil, func(context.Context, azlease.Token) error { return nil })
			},
		},
		{
			// A follower that is not the leader's standby (another one is:
			// the measured one ranks below it), which polls every second
			// instead: docs/design/succession.md has the standby's cost.
			name: "Elector follower", poll: 5 * time.Second, unchanged: true,
			hold: func(t *testing.T, e *emu) func() {
				el, err := azlease.NewElector(e.client("h"), "svc", nil)
				require.NoError(t, err)
				require.NoError(t, el.Start(ctx, nil))
				time.Sleep(time.Second)
				require.True(t, el.IsLeader())
				standby, err := azlease.NewElector(e.client("s"), "svc", nil)
				require.NoError(t, err)
				require.NoError(t, standby.Start(ctx, nil))
				return func() { _ = standby.Stop(ctx); _ = el.Stop(ctx) }
			},
			wait: func(ctx context.Context, cc *container.Client, _ bool) {
				el, _ := azlease.NewElector(cc, "svc", &azlease.ElectorOptions{Priority: -1})
				_ = el.Start(ctx, nil)
				<-ctx.Done()
				_ = el.Stop(context.Background())
			},
		},
	}
}

// idleCost is one waiter's requests and failed requests per minute while
// the lock is held, over window after a minute to settle.
type idleCost struct{ requests, failed float64 }

func measureIdle(t *testing.T, k waiterKind, old bool, window time.Duration) idleCost {
	var cost idleCost
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		release := k.hold(t, e)
		var c counter
		cc := countedClient(t, e.Server, "w", &c)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			k.wait(ctx, cc, old)
		}()
		time.Sleep(time.Minute)
		o0, f0 := c.mark()
		time.Sleep(window)
		ops, failed := c.since(o0, f0)
		cancel()
		<-done
		release()
		minutes := window.Minutes()
		cost = idleCost{requests: float64(len(ops)) / minutes, failed: float64(len(failed)) / minutes}
	})
	return cost
}

// lockHandoff measures one Lock handoff: a holder unlocks at a random
// phase of the waiter's polls; d is the time from the end of its Unlock to
// the waiter's Lock returning, poll the part of it from the waiter's first
// request after the release (the poll that takes the lock), and n the
// waiter's requests in between (each taking waitLatency).
func lockHandoff(t *testing.T, old bool, seed uint64) (d, poll time.Duration, n int) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		holder, ok, err := newMutex(t, e, "h", "job", nil).TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		c := counter{latency: waitLatency}
		m, err := azlease.NewMutex(countedClient(t, e.Server, "w", &c), "job", unordered)
		require.NoError(t, err)
		type acquired struct {
			at  time.Time
			ops int
		}
		got := make(chan acquired, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			var l *azlease.Lock
			if old {
				pollLoop(ctx, time.Second, func() bool {
					var ok bool
					l, ok, _ = m.TryLock(ctx)
					return ok
				})
			} else {
				var err error
				l, err = m.Lock(ctx)
				assert.NoError(t, err)
			}
			ops, _ := c.mark()
			got <- acquired{time.Now(), ops}
			_ = l.Unlock(ctx)
		}()
		rnd := rand.New(rand.NewPCG(seed, 19))
		time.Sleep(10*time.Second + time.Duration(rnd.Int64N(int64(2*time.Second))))
		o0, _ := c.mark()
		require.NoError(t, holder.Unlock(ctx))
		since := time.Now()
		a := <-got
		d, n = a.at.Sub(since), a.ops-o0
		for _, r := range c.sent() {
			if !r.at.Before(since) {
				poll = a.at.Sub(r.at)
				break
			}
		}
		<-done
	})
	return d, poll, n
}

// electorFailover measures one failover: the leader's machine is cut off
// (its requests get no answer) at a random phase; d is the time until the
// follower's task starts, its requests each taking waitLatency, and
// takeover the part of it from the send of the poll's read that found the
// lease free. old makes the takeover read the record again under the new
// lease, as before issue 19.
func electorFailover(t *testing.T, old bool, seed uint64) (d, takeover time.Duration) {
	restore := azlease.SetAlwaysReread(old)
	defer restore()
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		leader, err := azlease.NewElector(e.client("leader"), "svc", nil)
		require.NoError(t, err)
		require.NoError(t, leader.Start(ctx, nil))
		time.Sleep(time.Second)
		require.True(t, leader.IsLeader())
		c := counter{latency: waitLatency}
		started := make(chan time.Time, 1)
		follower, err := azlease.NewElector(countedClient(t, e.Server, "w", &c), "svc", nil)
		require.NoError(t, err)
		require.NoError(t, follower.Start(ctx, func(ctx context.Context, _ *azlease.Term) error {
			select {
			case started <- time.Now():
			default:
			}
			<-ctx.Done()
			return nil
		}))
		rnd := rand.New(rand.NewPCG(seed, 91))
		time.Sleep(30*time.Second + time.Duration(rnd.Int64N(int64(15*time.Second))))
		e.Partition("leader", azleasetest.Blackhole)
		since := time.Now()
		select {
		case at := <-started:
			d = at.Sub(since)
			sends := c.sent()
			last := -1
			for i, r := range sends {
				if r.op == opAcquire {
					last = i
				}
			}
			for i := last - 1; i >= 0; i-- {
				if sends[i].op == opRead {
					takeover = at.Sub(sends[i].at)
					break
				}
			}
		case <-time.After(3 * time.Minute):
			t.Fatal("no failover")
		}
		require.NoError(t, follower.Stop(ctx))
		e.Heal("leader")
		_ = leader.Stop(ctx)
	})
	return d, takeover
}

// TestWaiterCosts measures every kind of waiter's cost while the lock is
// held, and Lock's handoff and an Elector's failover, before and after
// waiters looked first; with AZLEASE_WAIT_REPORT=path it writes the table
// there. It asserts only that no waiter makes a failed request while it
// waits, and that none makes more requests than before.
func TestWaiterCosts(t *testing.T) {
	window := 10 * time.Minute
	handoffs, failovers := 40, 20
	report := os.Getenv("AZLEASE_WAIT_REPORT")
	switch {
	case report != "":
		handoffs, failovers = 1000, 300
	case testing.Short():
		window, handoffs, failovers = 2*time.Minute, 10, 5
	}
	type row struct {
		k        waiterKind
		old, new idleCost
	}
	var rows []row
	for _, k := range waiterKinds() {
		r := row{k: k, new: measureIdle(t, k, false, window)}
		r.old = r.new
		if !k.unchanged {
			r.old = measureIdle(t, k, true, window)
		}
		assert.Zero(t, r.new.failed, "%s: failed requests while waiting", k.name)
		assert.LessOrEqual(t, r.new.requests, r.old.requests*1.1, "%s: more requests than before", k.name)
		t.Logf("%s: before %.1f requests/min (%.1f failed), after %.1f (%.1f failed)", k.name, r.old.requests, r.old.failed, r.new.requests, r.new.failed)
		rows = append(rows, r)
	}

	var hOld, hNew, pOld, pNew, fOld, fNew, tOld, tNew []time.Duration
	var nOld, nNew int
	for i := range handoffs {
		d, p, n := lockHandoff(t, true, uint64(i))
		hOld, pOld, nOld = append(hOld, d), append(pOld, p), nOld+n
		d, p, n = lockHandoff(t, false, uint64(i))
		hNew, pNew, nNew = append(hNew, d), append(pNew, p), nNew+n
	}
	for i := range failovers {
		d, to := electorFailover(t, true, uint64(i))
		fOld, tOld = append(fOld, d), append(tOld, to)
		d, to = electorFailover(t, false, uint64(i))
		fNew, tNew = append(fNew, d), append(tNew, to)
	}
	pq := func(ds []time.Duration) string {
		return fmt.Sprintf("%v / %v", quantile(ds, 0.5).Round(time.Millisecond), quantile(ds, 0.9).Round(time.Millisecond))
	}
	t.Logf("Lock handoff p50/p90: before %s (poll that takes it %s, %.1f requests), after %s (%s, %.1f requests)",
		pq(hOld), pq(pOld), float64(nOld)/float64(handoffs), pq(hNew), pq(pNew), float64(nNew)/float64(handoffs))
	t.Logf("Elector failover p50/p90: before %s (takeover %s), after %s (takeover %s)", pq(fOld), pq(tOld), pq(fNew), pq(tNew))
	assert.LessOrEqual(t, quantile(pNew, 0.9), quantile(pOld, 0.9), "the poll that takes the lock is no slower")
	assert.Less(t, quantile(tNew, 0.5), quantile(tOld, 0.5), "a takeover saves the read")

	if report == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "One waiter on a lock held by another client, default options, in fake time (testing/synctest) on the in-process\n")
	fmt.Fprintf(&b, "emulator; requests counted by a transport in front of it, with their answers (failed: 4xx, 5xx or none), over %g minutes\n", window.Minutes())
	fmt.Fprintf(&b, "after a minute to settle. Before: the waiting loops of the code before issue 19, rebuilt from the public API (a TryLock\n")
	fmt.Fprintf(&b, "every poll is the old Mutex.Lock; TryAcquire every poll, which tries the slots one by one, the old Semaphore.Acquire;\n")
	fmt.Fprintf(&b, "a TryLock per name the old Claim). After: Mutex.Lock, Semaphore.Acquire (both with MutexOptions.Unordered, the waiting\n")
	fmt.Fprintf(&b, "these loops replaced; the fair queue's costs are in their own section), Claim as they are now. DoOnce's waiters and\n")
	fmt.Fprintf(&b, "an Elector's followers already read before acquiring: the same code, measured once. The Elector's follower (one\n")
	fmt.Fprintf(&b, "that is not the leader's standby) also writes its candidacy every 5 s since issue 36 (planned succession: its\n")
	fmt.Fprintf(&b, "liveness), half of its requests; a standby's and a leader's costs are in docs/design/succession.md.\n\n")
	fmt.Fprintf(&b, "| waiter | poll | before: requests/min | before: failed/min | after: requests/min | after: failed/min |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		before := fmt.Sprintf("%.1f | %.1f", r.old.requests, r.old.failed)
		if r.k.unchanged {
			before = "(same code) | (same code)"
		}
		fmt.Fprintf(&b, "| %s | %v | %s | %.1f | %.1f |\n", r.k.name, r.k.poll, before, r.new.requests, r.new.failed)
	}
	fmt.Fprintf(&b, "\nHandoff and failover, each of the waiter's requests taking %v (fake time). Lock's handoff: from the end of\n", waitLatency)
	fmt.Fprintf(&b, "the holder's Unlock to the waiter's Lock returning, the Unlock at a random phase of the waiter's 1 s polls (before:\n")
	fmt.Fprintf(&b, "a TryLock every poll, which acquires, reads and writes the epoch; after: read, acquire, write). An Elector's\n")
	fmt.Fprintf(&b, "failover: from its leader's machine being cut off (requests get no answer) at a random phase to the follower's task\n")
	fmt.Fprintf(&b, "starting, default options (15 s lease, 5 s polls; before: the takeover reads the record again under the new lease,\n")
	fmt.Fprintf(&b, "read, acquire, read, write; after: read, acquire, write). The totals are mostly the wait for the next poll (and for\n")
	fmt.Fprintf(&b, "the failover, the lease's expiry), at a phase drawn from the library's unseeded jitter, so before and after differ\n")
	fmt.Fprintf(&b, "there by sampling noise; the rows \"of which\" time the part the change touches.\n\n")
	fmt.Fprintf(&b, "| measurement | before: p50 / p90 | after: p50 / p90 | runs |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| Lock handoff: Unlock to Lock returning | %s | %s | %d |\n", pq(hOld), pq(hNew), handoffs)
	fmt.Fprintf(&b, "| … of which the poll that takes the lock: its first request sent to Lock returning | %s | %s | %d |\n", pq(pOld), pq(pNew), handoffs)
	fmt.Fprintf(&b, "| … the waiter's requests in between (mean) | %.2f | %.2f | %d |\n",
		float64(nOld)/float64(handoffs), float64(nNew)/float64(handoffs), handoffs)
	fmt.Fprintf(&b, "| Elector failover: cut off to the follower's task starting | %s | %s | %d |\n", pq(fOld), pq(fNew), failovers)
	fmt.Fprintf(&b, "| … of which the takeover: the read that found the lease free to the task starting | %s | %s | %d |\n", pq(tOld), pq(tNew), failovers)
	require.NoError(t, os.WriteFile(report, []byte(b.String()), 0o644))
}
