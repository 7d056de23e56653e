package azlease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/timing"
)

func newMutex(t *testing.T, e *emu, label, name string, opts *azlease.MutexOptions) *azlease.Mutex {
	t.Helper()
	m, err := azlease.NewMutex(e.client(label), name, opts)
	require.NoError(t, err)
	return m
}

func TestMutexTryLockLockUnlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newMutex(t, e, "a", "critical", nil)
		b := newMutex(t, e, "b", "critical", nil)

		la, ok, err := a.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, epoch1, la.Epoch())
		assert.True(t, la.Valid())

		lb, ok, err := b.TryLock(ctx)
		require.NoError(t, err, "held elsewhere is a normal outcome, not an error")
		assert.False(t, ok)
		assert.Nil(t, lb)

		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = b.Lock(wctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)

		got := make(chan *azlease.Lock)
		go func() {
			l, err := b.Lock(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		time.Sleep(30 * time.Second) // a holds it, renewing
		require.NoError(t, la.Unlock(ctx))
		unlocked := time.Now()
		lb = <-got
		assert.LessOrEqual(t, time.Since(unlocked), timing.HeadLook(30*time.Second, 200*time.Millisecond, time.Second)+100*time.Millisecond,
			"the waiter, first in line behind a hold it saw for 30 s, takes it within 4 % of that (timing.HeadLook)")
		assert.Equal(t, epoch1+1, lb.Epoch())
		<-la.Done()
		assert.ErrorIs(t, la.Err(), azlease.ErrStopped)
		require.NoError(t, la.Unlock(ctx), "Unlock is idempotent")
		require.NoError(t, lb.Unlock(ctx))
	})
}

// TestMutexExclusion: goroutines on four "processes" increment a shared
// counter with a slow read–sleep–write inside the lock, while a fifth of all
// requests fail and processes are cut off from storage at random for 20 s,
// so that holders really lose the lock mid-section. A holder whose lock's
// context ended does not write. A lost update, or two holders inside at
// once, would mean the exclusion failed.
func TestMutexExclusion(t *testing.T) {
	azlease.HeavyTest(t)
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		rng := rand.New(rand.NewPCG(3, 4))
		var rmu sync.Mutex
		c.setFaults(func(azleasetest.Request) azleasetest.Fault {
			rmu.Lock()
			defer rmu.Unlock()
			return transientFault(rng, 0.2, 0)
		})
		var counter, inside, increments, losses, holder atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var chaos sync.WaitGroup
		chaos.Go(func() { // every 40 s, cut the process inside the section off for 20 s
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Second):
				}
				for range 100 { // cut off a process while it is inside the section
					if inside.Load() == 1 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				p := fmt.Sprintf("p%d", holder.Load())
				c.partition(p, azleasetest.Hang)
				time.Sleep(20 * time.Second)
				c.heal(p)
			}
		})
		var drng sync.Mutex
		sections := rand.New(rand.NewPCG(5, 6))
		section := func() time.Duration { // up to longer than the validity
			drng.Lock()
			defer drng.Unlock()
			return time.Duration(sections.IntN(20000)) * time.Millisecond
		}
		for p := range 4 {
			m := newMutex(t, c.emu, fmt.Sprintf("p%d", p), "counter", nil)
			for range 3 { // goroutines of one process share its Mutex
				wg.Go(func() {
					for range 10 {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
						err := m.Do(ctx, func(ctx context.Context, _ *azlease.Lock) error {
							require.Equal(t, int64(1), inside.Add(1), "two holders inside the critical section")
							defer inside.Add(-1)
							holder.Store(int64(p))
							v := counter.Load()
							select {
							case <-time.After(section()):
							case <-ctx.Done():
								return context.Cause(ctx) // lost the lock: do not write
							}
							counter.Store(v + 1)
							increments.Add(1)
							return nil
						})
						cancel()
						switch {
						case errors.Is(err, azlease.ErrLeaseLost):
							losses.Add(1)
						case errors.Is(err, context.DeadlineExceeded):
							// waited 5 minutes (cut off, or unlucky): try again
						case errors.Is(err, azlease.ErrTransient):
							// cut off while unlocking: the lease expires on its own
						default:
							require.NoError(t, err)
						}
					}
				})
			}
		}
		wg.Wait()
		close(stop)
		chaos.Wait()
		assert.Equal(t, increments.Load(), counter.Load(), "no lost updates")
		assert.Greater(t, increments.Load(), int64(40))
		assert.Greater(t, losses.Load(), int64(0), "the test must actually lose locks")
		t.Logf("%d increments, %d sections cut short by a lost lock", increments.Load(), losses.Load())
	})
}

func TestMutexAutoRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		m := newMutex(t, e, "a", "long", nil)
		lock, err := m.Lock(context.Background())
		require.NoError(t, err)
		time.Sleep(time.Hour)
		assert.True(t, lock.Valid(), "held for an hour through renewals")
		g := e.Grants(testContainer, "long")
		require.Len(t, g, 1, "one continuous lease")
		require.NoError(t, lock.Unlock(context.Background()))
	})
}

// TestMutexLossCancelsContext: the holder is cut off; its lock's context ends
// at the validity deadline, another process takes the lock after Azure's
// lease expires, and the old holder's Unlock reports the loss without
// touching the new holder.
func TestMutexLossCancelsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		e := c.emu
		a := newMutex(t, e, "a", "m", nil)
		b := newMutex(t, e, "b", "m", nil)
		la, err := a.Lock(context.Background())
		require.NoError(t, err)
		c.partition("a", azleasetest.Hang)
		<-la.Done()
		assert.Equal(t, la.ValidUntil(), time.Now())
		assert.ErrorIs(t, la.Err(), azlease.ErrDeadlinePassed)

		lb, err := b.Lock(context.Background())
		require.NoError(t, err)
		c.heal("a")
		require.ErrorIs(t, la.Unlock(context.Background()), azlease.ErrLeaseLost)
		time.Sleep(time.Minute)
		assert.True(t, lb.Valid(), "the new holder is unaffected")
		require.NoError(t, lb.Unlock(context.Background()))

		// Broken by an operator: the context ends at the next renewal.
		lc, err := a.Lock(context.Background())
		require.NoError(t, err)
		_, err = newLease(t, e.client("op"), "m", nil).Break(context.Background(), 0)
		require.NoError(t, err)
		<-lc.Done()
		assert.ErrorIs(t, lc.Err(), azlease.ErrLeaseBroken)
		require.ErrorIs(t, lc.Unlock(context.Background()), azlease.ErrLeaseBroken)
	})
}

// TestMutexDoReportsLoss: fn succeeded but the lock was lost while it ran:
// Do says so.
func TestMutexDoReportsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		m := newMutex(t, c.emu, "a", "m", nil)
		err := m.Do(context.Background(), func(ctx context.Context, _ *azlease.Lock) error {
			c.partition("a", azleasetest.Drop)
			time.Sleep(30 * time.Second) // ignores ctx, finishes anyway
			c.heal("a")
			return nil
		})
		require.ErrorIs(t, err, azlease.ErrDeadlinePassed)
		boom := errors.New("boom")
		require.ErrorIs(t, m.Do(context.Background(), func(context.Context, *azlease.Lock) error { return boom }), boom)
	})
}

func TestClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		jobs := []string{"jobs/a", "jobs/b", "jobs/c"}
		seen := map[string]*azlease.Lock{}
		for w := range 3 {
			name, lock, err := azlease.Claim(ctx, e.client(fmt.Sprintf("w%d", w)), jobs, nil)
			require.NoError(t, err)
			require.NotContains(t, seen, name)
			seen[name] = lock
		}
		assert.Len(t, seen, 3)
		_, _, err := azlease.Claim(ctx, e.client("w3"), jobs, nil)
		require.ErrorIs(t, err, azlease.ErrLeaseHeld)

		require.NoError(t, seen["jobs/b"].Unlock(ctx))
		name, lock, err := azlease.Claim(ctx, e.client("w3"), jobs, nil)
		require.NoError(t, err)
		assert.Equal(t, "jobs/b", name, "the first free job")
		require.NoError(t, lock.Unlock(ctx))

		require.NoError(t, seen["jobs/a"].Unlock(ctx))
		require.NoError(t, seen["jobs/c"].Unlock(ctx))

		_, _, err = azlease.Claim(ctx, e.client("w3"), nil, nil)
		requireOptionError(t, err, "names")
		_, _, err = azlease.Claim(ctx, e.client("w3"), []string{"ok", ""}, nil)
		requireOptionError(t, err, "name")
	})
}

func TestMutexManyHeld(t *testing.T) {
	azlease.HeavyTest(t)
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("a") // one client: shared connections
		var locks []*azlease.Lock
		for i := range 200 {
			m, err := azlease.NewMutex(cc, fmt.Sprintf("m%d", i), nil)
			require.NoError(t, err)
			l, err := m.Lock(ctx)
			require.NoError(t, err)
			locks = append(locks, l)
		}
		time.Sleep(10 * time.Minute)
		for _, l := range locks {
			require.True(t, l.Valid())
			require.NoError(t, l.Unlock(ctx))
		}
	})
}

func TestNewMutexRejectsBadInput(t *testing.T) {
	cc := containerAt(t, "locks")
	_, err := azlease.NewMutex(nil, "m", nil)
	requireOptionError(t, err, "container")
	_, err = azlease.NewMutex(cc, "", nil)
	requireOptionError(t, err, "name")
	_, err = azlease.NewMutex(cc, "bad/", nil)
	requireOptionError(t, err, "name")
	for _, tc := range []struct {
		opts  azlease.MutexOptions
		field string
	}{
		{azlease.MutexOptions{LeaseDuration: time.Second}, "MutexOptions.LeaseDuration"},
		{azlease.MutexOptions{RenewInterval: 14 * time.Second}, "MutexOptions.RenewInterval"},
		{azlease.MutexOptions{PollInterval: time.Microsecond}, "MutexOptions.PollInterval"},
		{azlease.MutexOptions{Jitter: 2}, "MutexOptions.Jitter"},
		{azlease.MutexOptions{AttemptTimeout: -time.Second}, "MutexOptions.AttemptTimeout"},
		{azlease.MutexOptions{PollInterval: math.MaxInt64, Jitter: -1}, "MutexOptions.PollInterval"},
		{azlease.MutexOptions{PollInterval: time.Hour + 1}, "MutexOptions.PollInterval"},
		{azlease.MutexOptions{PollInterval: -time.Second}, "MutexOptions.PollInterval"},
	} {
		_, err := azlease.NewMutex(cc, "m", &tc.opts)
		requireOptionError(t, err, tc.field)
	}
	m, err := azlease.NewMutex(cc, "m", nil)
	require.NoError(t, err)
	requireOptionError(t, m.Do(context.Background(), nil), "fn")
}

// TestLockFencedState: state kept in the lock blob is read and written under
// the lock's lease; once the lock is lost, the old holder writes nothing.
func TestLockFencedState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		ctx := context.Background()
		a := newMutex(t, c.emu, "a", "state", nil)
		la, err := a.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, la.Write(ctx, []byte("checkpoint 1")))
		require.NoError(t, la.SetMetadata(ctx, map[string]string{"owner": "a"}))
		got, err := la.Read(ctx)
		require.NoError(t, err)
		assert.Equal(t, "checkpoint 1", string(got))

		c.partition("a", azleasetest.Hang)
		<-la.Done()
		lb, err := newMutex(t, c.emu, "b", "state", nil).Lock(ctx)
		require.NoError(t, err)
		c.heal("a")
		require.ErrorIs(t, la.Write(ctx, []byte("stale")), azlease.ErrNotHeld)
		_, err = la.Read(ctx)
		require.ErrorIs(t, err, azlease.ErrNotHeld)
		got, err = lb.Read(ctx)
		require.NoError(t, err)
		assert.Equal(t, "checkpoint 1", string(got))
		st, err := azlease.Inspect(ctx, c.emu.client("x"), "state")
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"owner": "a"}, st.Metadata)
		require.ErrorIs(t, la.Unlock(ctx), azlease.ErrLeaseLost)
		require.NoError(t, lb.Unlock(ctx))
	})
}

// TestMutexDoUnlocksWhenFnPanics: a panic in fn (recovered further up, as
// net/http does per request) still unlocks, and stops the renewals.
func TestMutexDoUnlocksWhenFnPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		a := newMutex(t, e, "a", "m", nil)
		func() {
			defer func() { assert.Equal(t, "boom", recover()) }()
			_ = a.Do(context.Background(), func(context.Context, *azlease.Lock) error { panic("boom") })
		}()
		lb, ok, err := newMutex(t, e, "b", "m", nil).TryLock(context.Background())
		require.NoError(t, err)
		require.True(t, ok, "unlocked despite the panic")
		require.NoError(t, lb.Unlock(context.Background()))
	})
}

// TestLockLossSeenByAWriteEndsTheTerm: when a fenced write learns from Azure
// that the lock is gone, the lock's context ends at once with that loss,
// not at the next renewal, and Unlock reports it.
func TestLockLossSeenByAWriteEndsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		la, err := newMutex(t, e, "a", "m", nil).Lock(ctx)
		require.NoError(t, err)
		_, err = newLease(t, e.client("op"), "m", nil).Break(ctx, 0)
		require.NoError(t, err)
		require.ErrorIs(t, la.Write(ctx, []byte("x")), azlease.ErrLeaseLost, "Azure refuses the write")
		assert.False(t, la.Valid())
		require.Error(t, la.Context().Err(), "ended at once")
		assert.ErrorIs(t, la.Err(), azlease.ErrLeaseLost)
		assert.ErrorIs(t, la.Unlock(ctx), azlease.ErrLeaseLost)
	})
}

// TestMutexCancelledLockLeavesNoOrphan: Lock's context ends while the epoch
// write that follows a granted acquire is in flight. The lease is given
// TestMutexCancelledLockHonoursTheDeadline: Lock's context ends while the
// epoch write of a granted lease hangs. Lock returns at the deadline, not
// later: it does not overrun it to give the lease back, which frees itself
// when it expires; then another holder takes it.
func TestMutexCancelledLockHonoursTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpSetMetadata {
				return azleasetest.Fault{Delay: 2 * time.Second}
			}
			return azleasetest.Fault{}
		}))
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := newMutex(t, e, "a", "m", nil).Lock(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start), "returned at its deadline")
		b := newMutex(t, e, "b", "m", &azlease.MutexOptions{PollInterval: 100 * time.Millisecond})
		lb, err := b.Lock(context.Background())
		require.NoError(t, err)
		assert.LessOrEqual(t, time.Since(start), 16*time.Second+200*time.Millisecond, "within the lease's duration")
		require.NoError(t, lb.Unlock(context.Background()))
	})
}

// TestMutexUnlockReleasesAfterUnansweredRenewals: renewals reach Azure but
// their answers never come back, so the lock's term ends at its deadline.
// The renewals did land: once the network heals, Unlock still releases the
// lease instead of leaving it to block others.
func TestMutexUnlockReleasesAfterUnansweredRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		la, err := newMutex(t, e, "a", "m", nil).Lock(ctx)
		require.NoError(t, err)
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpRenewLease {
				return azleasetest.Fault{Action: azleasetest.ApplyThenHang}
			}
			return azleasetest.Fault{}
		}))
		<-la.Done()
		assert.ErrorIs(t, la.Err(), azlease.ErrDeadlinePassed)
		e.SetFaults(nil)
		require.ErrorIs(t, la.Unlock(ctx), azlease.ErrDeadlinePassed, "the loss is reported")
		lb, ok, err := newMutex(t, e, "b", "m", nil).TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok, "released, not left to expire")
		require.NoError(t, lb.Unlock(ctx))
	})
}

// TestMutexUnlockWithEndedContext: `defer lock.Unlock(ctx)` at shutdown runs
// with a cancelled ctx; Unlock still gives the lock back (one bounded
// attempt), so another process takes it at once instead of a lease later.
func TestMutexUnlockWithEndedContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		a := newMutex(t, e, "a", "m", nil)
		b := newMutex(t, e, "b", "m", nil)
		ctx, cancel := context.WithCancel(context.Background())
		la, err := a.Lock(ctx)
		require.NoError(t, err)
		cancel()
		require.NoError(t, la.Unlock(ctx))
		assert.False(t, la.Valid())
		lb, ok, err := b.TryLock(context.Background())
		require.NoError(t, err)
		require.True(t, ok, "released despite the ended context")
		require.NoError(t, lb.Unlock(context.Background()))
	})
}

// TestMutexUnlockRetries: a release that fails (storage unreachable) can be
// retried by calling Unlock again; once it succeeds, further calls return
// the same result without a request.
func TestMutexUnlockRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		e := c.emu
		a := newMutex(t, e, "a", "m", nil)
		b := newMutex(t, e, "b", "m", nil)
		la, err := a.Lock(context.Background())
		require.NoError(t, err)
		c.partition("a", azleasetest.Drop)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = la.Unlock(ctx)
		cancel()
		require.Error(t, err)
		require.NotErrorIs(t, err, azlease.ErrLeaseLost)
		assert.False(t, la.Valid(), "not held once Unlock was called")
		_, ok, err := b.TryLock(context.Background())
		require.NoError(t, err)
		require.False(t, ok, "still leased on the server")

		c.heal("a")
		var requests atomic.Int64
		c.setFaults(faultsFor("a", func(azleasetest.Request) azleasetest.Fault {
			requests.Add(1)
			return azleasetest.Fault{}
		}))
		require.NoError(t, la.Unlock(context.Background()), "the retry releases it")
		lb, ok, err := b.TryLock(context.Background())
		require.NoError(t, err)
		require.True(t, ok)
		n := requests.Load()
		require.NoError(t, la.Unlock(context.Background()))
		assert.Equal(t, n, requests.Load(), "no request after a successful release")
		require.NoError(t, lb.Unlock(context.Background()))
	})
}

// TestZeroLock: a zero Lock is not held and never panics.
func TestZeroLock(t *testing.T) {
	var lk azlease.Lock
	require.ErrorIs(t, lk.Unlock(context.Background()), azlease.ErrNotHeld)
	var nilLock *azlease.Lock
	require.ErrorIs(t, nilLock.Unlock(context.Background()), azlease.ErrNotHeld)
}

// TestZeroLockTerm: the Term methods of a zero Lock report it as not held.
func TestZeroLockTerm(t *testing.T) {
	var lk azlease.Lock
	assert.False(t, lk.Valid())
	assert.ErrorIs(t, lk.Err(), azlease.ErrNotHeld)
	<-lk.Done()
	assert.Zero(t, lk.Epoch())
	assert.Zero(t, lk.ValidUntil())
	lk.Heartbeat()
	require.ErrorIs(t, lk.Write(context.Background(), nil), azlease.ErrNotHeld)
}

// TestCleanReleaseIsRecordedForEveryHolder (issue 19 item 5): a Mutex that
// unlocked, a Semaphore slot and a DoOnce runner record a clean release, as
// an Elector does, so they no longer read as crashed; a bare Lease does not
// (documented), nor does a hand-off.
func TestCleanReleaseIsRecordedForEveryHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		released := func(blob string) bool {
			t.Helper()
			st, err := azlease.Inspect(ctx, e.client("x"), blob)
			require.NoError(t, err)
			require.True(t, st.Exists)
			require.False(t, st.Leased)
			return st.Released
		}
		m, err := azlease.NewMutex(e.client("a"), "m", nil)
		require.NoError(t, err)
		require.NoError(t, m.Do(ctx, func(context.Context, *azlease.Lock) error { return nil }))
		assert.True(t, released("m"), "Mutex")

		s, err := azlease.NewSemaphore(e.client("a"), "s", 1, nil)
		require.NoError(t, err)
		lk, err := s.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, lk.Unlock(ctx))
		assert.True(t, released(lk.Name()), "Semaphore")

		_, err = azlease.DoOnce(ctx, e.client("a"), "k", nil, func(context.Context, azlease.Token) error { return nil })
		require.NoError(t, err)
		assert.True(t, released("once/k"), "DoOnce")

		l := newLease(t, e.client("a"), "bare", nil)
		_, err = l.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		assert.False(t, released("bare"), "a bare Lease does not record it")

		// A crash (the lease left to expire) after a clean release reads as
		// not released: the marker is the epoch's.
		lk, err = m.Lock(ctx)
		require.NoError(t, err)
		e.Partition("a", azleasetest.Blackhole)
		time.Sleep(20 * time.Second)
		e.Heal("a")
		assert.False(t, released("m"), "the crashed holder's term")
		require.Error(t, lk.Unlock(ctx))
	})
}

// TestMutexDoLogsOnePair (issue 19 item 5): a Mutex.Do logs "locked" and
// "unlocked" at Info and its Lease's own lines at Debug; a bare Lease logs
// its own at Info.
func TestMutexDoLogsOnePair(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		var logs logBuffer
		debug := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		m, err := azlease.NewMutex(e.client("a"), "m", &azlease.MutexOptions{Logger: debug})
		require.NoError(t, err)
		require.NoError(t, m.Do(ctx, func(context.Context, *azlease.Lock) error { return nil }))
		// Besides the first use's "created the container" and "created the
		// lock blob", one pair.
		assert.Equal(t, 4, logs.count("level=INFO"), logs.String())
		assert.Equal(t, 2, logs.count("level=INFO", "azlease: created the"), logs.String())
		assert.Equal(t, 1, logs.count("level=INFO", "azlease: locked"))
		assert.Equal(t, 1, logs.count("level=INFO", "azlease: unlocked"))
		assert.Equal(t, 1, logs.count("level=DEBUG", "azlease: acquired"))
		assert.Equal(t, 1, logs.count("level=DEBUG", "azlease: released"))

		var bare logBuffer
		l := newLease(t, e.client("a"), "bare", &azlease.LeaseOptions{Logger: bare.logger()})
		_, err = l.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		assert.Equal(t, 1, bare.count("level=INFO", "azlease: acquired"), bare.String())
		assert.Equal(t, 1, bare.count("level=INFO", "azlease: released"), bare.String())
	})
}
