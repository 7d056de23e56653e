package azlease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// Defaults used by most scenarios: a 15 s lease renewed every 5 s (trusted
// for 14.25 s after each send), followers polling every 5 s ± 20 %.
var defaults = azlease.ElectorOptions{}

func TestElectorOneLeaderAmongMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		for _, n := range []string{"a", "b", "c"} {
			c.start(n, nil)
		}
		leader := c.waitLeader(time.Second)
		time.Sleep(2 * time.Minute)
		assert.Equal(t, []string{leader}, c.leaders(), "one leader, and it keeps leading")

		e := c.elector(leader)
		term := e.Term()
		require.NotNil(t, term)
		assert.Equal(t, epoch1, term.Epoch())
		assert.Equal(t, leader, e.Identity())

		for _, name := range []string{"a", "b", "c"} {
			info, err := c.elector(name).Leader(context.Background())
			require.NoError(t, err)
			assert.Equal(t, azlease.LeaderInfo{Leased: true, Holder: leader, Epoch: epoch1, Acquired: info.Acquired, Self: name == leader}, info)
		}
		c.stopAll()
		c.checkSafety()
	})
}

func TestElectorFollowersObserveLeaderChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		a := c.start("a", nil)
		c.waitLeader(time.Second)
		b := c.start("b", nil)

		got := <-b.Changes()
		assert.Equal(t, azlease.LeaderInfo{Leased: true, Holder: "a", Epoch: epoch1, Acquired: got.Acquired}, got)
		self := <-a.Changes()
		assert.True(t, self.Self)

		require.NoError(t, a.Stop(context.Background()))
		var last azlease.LeaderInfo
		for info := range b.Changes() { // closed when b stops
			last = info
			if info.Self {
				break
			}
		}
		assert.Equal(t, azlease.LeaderInfo{Leased: true, Holder: "b", Epoch: epoch1 + 1, Acquired: last.Acquired, Self: true}, last)
		_, open := <-a.Changes()
		assert.False(t, open, "Changes is closed when the elector stops")
		c.stopAll()
	})
}

// TestElectorGracefulHandoff: the leader stops; its task returns before the
// lease is released (NoSuccession) or handed over (succession), and a
// follower leads within one poll interval of the Stop. Without succession
// the term ends when Stop is called and the follower finds the lease free at
// its next poll; with it, the leader leads on until the follower has
// acknowledged its designation (at its next poll), and the follower leads a
// fraction of a second after the term's end.
func TestElectorGracefulHandoff(t *testing.T) {
	for _, succession := range []bool{false, true} {
		t.Run(map[bool]string{false: "NoSuccession", true: "succession"}[succession], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := defaults
				opts.NoSuccession = !succession
				c := newCluster(t, opts)
				a := c.start("a", nil)
				c.waitLeader(time.Second)
				c.start("b", nil)
				time.Sleep(time.Minute)

				stopped := time.Now()
				require.NoError(t, a.Stop(context.Background()))
				assert.False(t, a.IsLeader())
				assert.Equal(t, "b", c.waitLeader(10*time.Second))
				handoff := time.Since(stopped)
				assert.LessOrEqual(t, handoff, 6*time.Second+500*time.Millisecond, "within PollInterval × (1 + Jitter) (and the acknowledgement's margin)")

				st, err := azlease.Inspect(context.Background(), c.emu.client("x"), "leader")
				require.NoError(t, err)
				assert.Equal(t, "b", st.Holder)
				require.Len(t, st.History, 2)
				assert.Equal(t, "a", st.History[1].Holder)

				c.stopAll()
				terms := c.checkSafety()
				require.Len(t, terms, 2)
				assert.ErrorIs(t, terms[0].cause, azlease.ErrStopped)
				if succession {
					assert.False(t, terms[0].end.Before(stopped))
					assert.Less(t, terms[1].start.Sub(terms[0].end), 500*time.Millisecond, "leaderless: the successor's poll and a few requests")
				} else {
					assert.Equal(t, stopped, terms[0].end, "the term's context ended when Stop was called")
				}
				assert.Equal(t, "b", terms[1].node)
				assert.Equal(t, epoch1+1, terms[1].epoch)
			})
		})
	}
}

// TestElectorCrashFailover: the leader is cut off (its requests hang). It
// stops believing at its validity deadline; a follower takes over when
// Azure's lease expires, within LeaseDuration + PollInterval.
func TestElectorCrashFailover(t *testing.T) {
	for _, how := range []azleasetest.Action{azleasetest.Hang, azleasetest.Drop} {
		t.Run(map[azleasetest.Action]string{azleasetest.Hang: "hang", azleasetest.Drop: "drop"}[how], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, defaults)
				a := c.start("a", nil)
				c.waitLeader(time.Second)
				c.start("b", nil)
				time.Sleep(30 * time.Second)
				validUntil := a.Term().ValidUntil()

				crashed := time.Now()
				c.partition("a", how)
				time.Sleep(time.Until(validUntil) - time.Nanosecond)
				assert.True(t, a.IsLeader())
				time.Sleep(time.Nanosecond)
				assert.False(t, a.IsLeader(), "demoted at exactly the validity deadline")

				assert.Equal(t, "b", c.waitLeader(30*time.Second))
				failover := time.Since(crashed)
				assert.LessOrEqual(t, failover, 15*time.Second+6*time.Second)

				c.stopAll()
				terms := c.checkSafety()
				require.Len(t, terms, 2)
				assert.ErrorIs(t, terms[0].cause, azlease.ErrDeadlinePassed)
			})
		})
	}
}

// TestElectorNoDemotionUnderTransientFaults: a fifth of all requests fail
// (503, lost connections, lost responses, slow answers) and the leader never
// loses its term while its validity remains.
func TestElectorNoDemotionUnderTransientFaults(t *testing.T) {
	azlease.HeavyTest(t)
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		rng := rand.New(rand.NewPCG(7, 7))
		var mu sync.Mutex
		c.setFaults(func(azleasetest.Request) azleasetest.Fault {
			mu.Lock()
			defer mu.Unlock()
			if rng.Float64() >= 0.2 {
				return azleasetest.Fault{}
			}
			return []azleasetest.Fault{
				{Action: azleasetest.Fail},
				{Action: azleasetest.Drop},
				{Action: azleasetest.ApplyThenDrop},
				{Delay: 2 * time.Second},
				{Action: azleasetest.Fail, Status: 500, Code: "InternalError"},
			}[rng.IntN(5)]
		})
		c.start("a", nil)
		c.waitLeader(time.Minute)
		c.start("b", nil)
		time.Sleep(time.Hour)
		assert.Equal(t, []string{"a"}, c.leaders())
		c.stopAll()
		assert.Len(t, termsOf(c.checkSafety(), "a"), 1, "a led for the whole hour in one term")
	})
}

// TestElectorRidesOutAnOutage: every request fails for 5 s (shorter than the
// validity left after a scheduled renewal): no demotion.
func TestElectorRidesOutAnOutage(t *testing.T) {
	for _, action := range []azleasetest.Action{azleasetest.Fail, azleasetest.Drop, azleasetest.Hang} {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, defaults)
			c.start("a", nil)
			c.waitLeader(time.Second)
			c.start("b", nil)
			for range 10 {
				time.Sleep(20 * time.Second)
				c.setFaults(func(azleasetest.Request) azleasetest.Fault { return azleasetest.Fault{Action: action} })
				time.Sleep(5 * time.Second)
				c.setFaults(nil)
			}
			assert.Equal(t, []string{"a"}, c.leaders())
			c.stopAll()
			assert.Len(t, termsOf(c.checkSafety(), "a"), 1, "no demotion")
		})
	}
}

// TestElectorDefinitiveLoss: an operator breaks the lease; the leader's term
// ends at its next renewal with ErrLeaseBroken, without waiting for its
// deadline, and its task's context says so.
func TestElectorDefinitiveLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		a := c.start("a", nil)
		c.waitLeader(time.Second)
		term := a.Term()
		time.Sleep(time.Second)
		_, err := newLease(t, c.emu.client("operator"), "leader", nil).Break(context.Background(), 0)
		require.NoError(t, err)
		<-term.Done()
		assert.ErrorIs(t, term.Err(), azlease.ErrLeaseBroken)
		assert.ErrorIs(t, context.Cause(term.Context()), azlease.ErrLeaseLost)
		// The first renewal is due 2.5–5 s after the grant (jittered), so at
		// most 14.25 s - 2.5 s of validity was left when the term ended.
		assert.LessOrEqual(t, time.Until(term.ValidUntil()), 11750*time.Millisecond)
		assert.Greater(t, time.Until(term.ValidUntil()), time.Duration(0), "ended before its deadline")
		// It contends again and, alone, leads again with a larger epoch.
		c.waitLeader(10 * time.Second)
		assert.Equal(t, epoch1+1, a.Term().Epoch())
		c.stopAll()
	})
}

// TestElectorHangingRenewals: renewals hang; the term ends at the validity
// deadline with ErrDeadlinePassed even though a request is still open.
func TestElectorHangingRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		a := c.start("a", nil)
		c.waitLeader(time.Second)
		term := a.Term()
		c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpRenewLease {
				return azleasetest.Fault{Action: azleasetest.ApplyThenHang} // renewed, but nobody hears it
			}
			return azleasetest.Fault{}
		})
		<-term.Done()
		assert.Equal(t, term.ValidUntil(), time.Now())
		assert.ErrorIs(t, term.Err(), azlease.ErrDeadlinePassed)
		c.setFaults(nil)
		c.waitLeader(30 * time.Second)
		c.stopAll()
		c.checkSafety()
	})
}

// TestElectorPausedPastDeadline: the renewer oversleeps by 20 s, as if its
// process were paused. The term ends at the deadline regardless, the
// renewer does not trust the lease when it wakes, and leadership resumes
// only through a new acquisition with a larger epoch.
func TestElectorPausedPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		var log syncBuffer
		e, err := azlease.NewElector(c.emu.client("a"), "leader", &azlease.ElectorOptions{Identity: "a",
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		require.NoError(t, err)
		var paused atomic.Bool
		azlease.SetBeforeRenew(e, func() {
			if paused.CompareAndSwap(false, true) {
				time.Sleep(20 * time.Second)
			}
		})
		c.nodes["a"] = e
		require.NoError(t, e.Start(context.Background(), c.task("a")))
		c.waitLeader(time.Second)
		term := e.Term()
		<-term.Done()
		assert.Equal(t, term.ValidUntil(), time.Now(), "the watchdog ended the term on time")
		assert.ErrorIs(t, term.Err(), azlease.ErrDeadlinePassed)
		c.waitLeader(time.Minute)
		assert.Contains(t, log.String(), "woke up after the validity deadline; not trusting the lease",
			"the renewer noticed its own pause instead of renewing")
		assert.Greater(t, e.Term().Epoch(), term.Epoch(), "trust comes back only with a new term")
		c.stopAll()
		c.checkSafety()
	})
}

// TestElectorTakeoverDelay: after a crash, the new leader holds the lease for
// TakeoverDelay before it leads; after a clean handoff it leads at once.
func TestElectorTakeoverDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := azlease.ElectorOptions{TakeoverDelay: 10 * time.Second}
		c := newCluster(t, opts)
		c.start("a", nil)
		c.waitLeader(time.Second)
		b := c.start("b", nil)
		time.Sleep(time.Minute)

		c.partition("a", azleasetest.Hang)
		acquired := waitHolder(t, c, "b", time.Minute)
		assert.False(t, b.IsLeader(), "holds the lease but waits")
		assert.Equal(t, "b", c.waitLeader(time.Minute))
		assert.InDelta(t, float64(10*time.Second), float64(time.Since(acquired)), float64(20*time.Millisecond))

		// A clean handoff: no delay.
		c.heal("a")
		time.Sleep(30 * time.Second)
		stopped := time.Now()
		require.NoError(t, b.Stop(context.Background()))
		c.waitLeader(time.Minute)
		assert.Less(t, time.Since(stopped), 7*time.Second)
		c.stopAll()
		c.checkSafety()
	})
}

func TestElectorAfterTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		boom := errors.New("boom")
		el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{AfterTask: azlease.StopElecting})
		require.NoError(t, err)
		err = el.Run(context.Background(), func(ctx context.Context, term *azlease.Term) error {
			time.Sleep(time.Minute) // work, renewing meanwhile
			return boom
		})
		require.ErrorIs(t, err, boom)
		st, err := azlease.Inspect(context.Background(), e.client("x"), "leader")
		require.NoError(t, err)
		assert.False(t, st.Leased, "released when the task returned")
		assert.True(t, st.Released, "cleanly")

		// ReleaseAndContend: the task runs again in a new term.
		el2, err := azlease.NewElector(e.client("b"), "leader", nil)
		require.NoError(t, err)
		var runs atomic.Int32
		ctx, cancel := context.WithCancel(context.Background())
		err = el2.Run(ctx, func(ctx context.Context, term *azlease.Term) error {
			if runs.Add(1) == 3 {
				cancel()
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, int32(3), runs.Load())
	})
}

// TestElectorDrainTimeout: a task that ignores its context for longer than
// DrainTimeout keeps its lease until then (renewed), then the lease is left
// to expire rather than released under it; Stop waits for the task.
func TestElectorDrainTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		a, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{DrainTimeout: 20 * time.Second})
		require.NoError(t, err)
		taskEnd := make(chan time.Time, 1)
		require.NoError(t, a.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			<-ctx.Done()
			time.Sleep(time.Minute) // slow to stop
			taskEnd <- time.Now()
			return nil
		}))
		time.Sleep(10 * time.Second)
		b, err := azlease.NewElector(e.client("b"), "leader", &azlease.ElectorOptions{PollInterval: time.Second})
		require.NoError(t, err)
		var bStart atomic.Int64
		require.NoError(t, b.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			bStart.Store(time.Now().UnixNano())
			<-ctx.Done()
			return nil
		}))

		stop := time.Now()
		require.NoError(t, a.Stop(context.Background()))
		end := <-taskEnd
		assert.Equal(t, stop.Add(time.Minute), end, "Stop waited for the task")
		require.NotZero(t, bStart.Load())
		started := time.Unix(0, bStart.Load())
		assert.True(t, started.After(stop.Add(20*time.Second)), "not released during the drain")
		assert.True(t, started.Before(end), "left to expire after DrainTimeout, not held until the task ended")
		require.NoError(t, b.Stop(context.Background()))
	})
}

func TestElectorHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{HeartbeatTimeout: 10 * time.Second})
		require.NoError(t, err)
		require.ErrorIs(t, el.Check(), azlease.ErrNotStarted)
		h := el.HealthHandler()
		probe := func() (int, string) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			b, _ := io.ReadAll(rec.Body)
			return rec.Code, string(b)
		}
		var beat atomic.Bool
		beat.Store(true)
		require.NoError(t, el.Start(context.Background(), func(ctx context.Context, term *azlease.Term) error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
					if beat.Load() {
						term.Heartbeat()
					}
				}
			}
		}))
		time.Sleep(time.Minute)
		require.NoError(t, el.Check())
		code, body := probe()
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, fmt.Sprintf("ok: leading, epoch %d\n", epoch1), body)

		beat.Store(false) // the leader's work stalls while the lease stays renewed
		time.Sleep(12 * time.Second)
		assert.True(t, el.IsLeader())
		require.ErrorContains(t, el.Check(), "heartbeat")
		code, _ = probe()
		assert.Equal(t, http.StatusServiceUnavailable, code)
		beat.Store(true)
		time.Sleep(2 * time.Second)
		require.NoError(t, el.Check())

		require.NoError(t, el.Stop(context.Background()))
		require.ErrorContains(t, el.Check(), "stopped")
	})
}

func TestElectorHealthStalledAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		el, err := azlease.NewElector(c.emu.client("a"), "leader", nil)
		require.NoError(t, err)
		release := make(chan struct{})
		require.NoError(t, el.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			<-ctx.Done()
			<-release // a task that does not stop when it should
			return nil
		}))
		time.Sleep(10 * time.Second)
		c.partition("a", azleasetest.Hang)
		time.Sleep(30 * time.Second)
		assert.False(t, el.IsLeader())
		require.ErrorContains(t, el.Check(), "still running")
		close(release)
		c.heal("a")
		time.Sleep(time.Minute)
		require.NoError(t, el.Check())
		require.NoError(t, el.Stop(context.Background()))
	})
}

func TestElectorLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		el, err := azlease.NewElector(e.client("a"), "leader", nil) // nil options: defaults
		require.NoError(t, err)
		require.ErrorIs(t, el.Stop(context.Background()), azlease.ErrNotStarted)
		require.NoError(t, el.Start(context.Background(), nil))
		require.ErrorIs(t, el.Start(context.Background(), nil), azlease.ErrAlreadyStarted)
		time.Sleep(time.Second)
		assert.True(t, el.IsLeader(), "leads without a task")
		require.NoError(t, el.Stop(context.Background()))
		require.NoError(t, el.Stop(context.Background()), "stopping twice")
		assert.False(t, el.IsLeader())
		require.ErrorIs(t, el.Start(context.Background(), nil), azlease.ErrAlreadyStarted, "an Elector runs once")
		st, err := azlease.Inspect(context.Background(), e.client("x"), "leader")
		require.NoError(t, err)
		assert.False(t, st.Leased)

		// A cancelled parent context stops it; Run returns at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		el2, err := azlease.NewElector(e.client("b"), "leader", nil)
		require.NoError(t, err)
		require.NoError(t, el2.Run(ctx, nil))
		<-el2.Done()

		// Stop gives up waiting when its own context ends, and can be
		// called again.
		el3, err := azlease.NewElector(e.client("c"), "leader", nil)
		require.NoError(t, err)
		block := make(chan struct{})
		require.NoError(t, el3.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			<-block
			return nil
		}))
		time.Sleep(time.Second)
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		defer scancel()
		require.ErrorIs(t, el3.Stop(sctx), context.DeadlineExceeded)
		close(block)
		require.NoError(t, el3.Stop(context.Background()))
	})
}

func TestNewElectorRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  azlease.ElectorOptions
		field string
	}{
		{"lease too short", azlease.ElectorOptions{LeaseDuration: 10 * time.Second}, "ElectorOptions.LeaseDuration"},
		{"renew leaves no room for retries", azlease.ElectorOptions{RenewInterval: 9 * time.Second}, "ElectorOptions.RenewInterval"},
		{"renew too often", azlease.ElectorOptions{RenewInterval: time.Millisecond}, "ElectorOptions.RenewInterval"},
		// RenewInterval left zero: the error names the field the caller set.
		{"attempt too long for the default renew", azlease.ElectorOptions{AttemptTimeout: 4750 * time.Millisecond}, "ElectorOptions.AttemptTimeout"},
		{"negative renew", azlease.ElectorOptions{RenewInterval: -time.Second}, "ElectorOptions.RenewInterval"},
		{"poll too often", azlease.ElectorOptions{PollInterval: time.Millisecond}, "ElectorOptions.PollInterval"},
		{"jitter too large", azlease.ElectorOptions{Jitter: 0.6}, "ElectorOptions.Jitter"},
		{"negative takeover delay", azlease.ElectorOptions{TakeoverDelay: -1}, "ElectorOptions.TakeoverDelay"},
		{"negative drain timeout", azlease.ElectorOptions{DrainTimeout: -1}, "ElectorOptions.DrainTimeout"},
		{"negative heartbeat timeout", azlease.ElectorOptions{HeartbeatTimeout: -1}, "ElectorOptions.HeartbeatTimeout"},
		{"endless poll without jitter", azlease.ElectorOptions{PollInterval: math.MaxInt64, Jitter: -1}, "ElectorOptions.PollInterval"},
		{"endless poll", azlease.ElectorOptions{PollInterval: math.MaxInt64}, "ElectorOptions.PollInterval"},
		{"poll over an hour", azlease.ElectorOptions{PollInterval: time.Hour + 1}, "ElectorOptions.PollInterval"},
		{"takeover delay over a day", azlease.ElectorOptions{TakeoverDelay: 24*time.Hour + 1}, "ElectorOptions.TakeoverDelay"},
		{"endless drain timeout", azlease.ElectorOptions{DrainTimeout: math.MaxInt64}, "ElectorOptions.DrainTimeout"},
		{"heartbeat timeout over a day", azlease.ElectorOptions{HeartbeatTimeout: 24*time.Hour + 1}, "ElectorOptions.HeartbeatTimeout"},
		{"endless renew", azlease.ElectorOptions{RenewInterval: math.MaxInt64}, "ElectorOptions.RenewInterval"},
		{"endless attempt", azlease.ElectorOptions{AttemptTimeout: math.MaxInt64}, "ElectorOptions.AttemptTimeout"},
		{"endless margin", azlease.ElectorOptions{SafetyMargin: math.MaxInt64}, "ElectorOptions.SafetyMargin"},
		{"endless lease", azlease.ElectorOptions{LeaseDuration: math.MaxInt64}, "ElectorOptions.LeaseDuration"},
		{"unknown AfterTask", azlease.ElectorOptions{AfterTask: 7}, "ElectorOptions.AfterTask"},
		{"margin", azlease.ElectorOptions{SafetyMargin: time.Nanosecond}, "ElectorOptions.SafetyMargin"},
		{"identity", azlease.ElectorOptions{Identity: "a\x00"}, "ElectorOptions.Identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := azlease.NewElector(containerAt(t, "locks"), "leader", &tc.opts)
			requireOptionError(t, err, tc.field)
		})
	}
	_, err := azlease.NewElector(nil, "leader", nil)
	requireOptionError(t, err, "container")
	_, err = azlease.NewElector(containerAt(t, "locks"), "", nil)
	requireOptionError(t, err, "blobName")
	_, err = azlease.NewElector(containerAt(t, "locks"), "leader", &azlease.ElectorOptions{
		LeaseDuration: 60 * time.Second, RenewInterval: 50 * time.Second, Jitter: -1, PollInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err, "boundary values are accepted")
	_, err = azlease.NewElector(containerAt(t, "locks"), "leader", &azlease.ElectorOptions{
		PollInterval: azlease.MaxPollInterval, Jitter: 0.5,
		TakeoverDelay: azlease.MaxWait, DrainTimeout: azlease.MaxWait, HeartbeatTimeout: azlease.MaxWait,
	})
	require.NoError(t, err, "upper bounds are accepted")
}

func termsOf(terms []believed, node string) []believed {
	var out []believed
	for _, b := range terms {
		if b.node == node {
			out = append(out, b)
		}
	}
	return out
}

// waitHolder waits (in fake time, polling every 10 ms) until the lock blob
// names holder, and returns when it first did.
func waitHolder(t *testing.T, c *cluster, holder string, limit time.Duration) time.Time {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st, err := azlease.Inspect(context.Background(), c.emu.client("observer"), c.blob); err == nil && st.Holder == holder {
			return time.Now()
		}
	}
	t.Fatalf("%s did not acquire within %v", holder, limit)
	return time.Time{}
}

// TestElectorStopWhileRenewalRetries: Stop arrives while a renewal is failing
// and being retried. The lease is still released (the follower takes over at
// its next poll), not left to expire.
func TestElectorStopWhileRenewalRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		a := c.start("a", nil)
		c.waitLeader(time.Second)
		c.start("b", &azlease.ElectorOptions{PollInterval: time.Second, Identity: "b"})
		c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
			// The leader's renewals only: a successor that takes a
			// hand-off over renews once it has changed the lease to its
			// own ID.
			if r.Op == azleasetest.OpRenewLease && r.Client == "a" {
				return azleasetest.Fault{Action: azleasetest.Fail} // 503: retried
			}
			return azleasetest.Fault{}
		})
		time.Sleep(7 * time.Second) // the renewal due at 5 s is being retried
		require.True(t, a.IsLeader())
		stopped := time.Now()
		require.NoError(t, a.Stop(context.Background()))
		assert.Equal(t, "b", c.waitLeader(10*time.Second))
		assert.Less(t, time.Since(stopped), 2*time.Second, "released, not left to expire")
		c.stopAll()
		c.checkSafety()
	})
}

// TestElectorLossSeenByAWriteEndsTheTerm: an operator breaks the lease and
// another holder takes it; the leader's next fenced write is refused by
// Azure, and that ends its leadership at once, without waiting for its next
// renewal.
func TestElectorLossSeenByAWriteEndsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		terms := make(chan *azlease.Term, 1)
		a, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{Identity: "a"})
		require.NoError(t, err)
		require.NoError(t, a.Start(ctx, func(ctx context.Context, term *azlease.Term) error {
			terms <- term
			<-ctx.Done()
			return nil
		}))
		term := <-terms
		time.Sleep(6 * time.Second)
		_, err = newLease(t, e.client("op"), "leader", nil).Break(ctx, 0)
		require.NoError(t, err)
		b := newLease(t, e.client("b"), "leader", nil)
		_, err = b.Acquire(ctx)
		require.NoError(t, err)

		require.ErrorIs(t, term.Write(ctx, []byte("x")), azlease.ErrLeaseLost)
		assert.False(t, a.IsLeader(), "no longer leads, at once")
		require.Error(t, term.Err())
		assert.ErrorIs(t, term.Err(), azlease.ErrLeaseLost)
		require.NoError(t, b.Release(ctx))
		require.NoError(t, a.Stop(ctx))
	})
}

// TestElectorStopDuringEpochWrite: Stop arrives while the epoch write after
// a granted acquire hangs. The lease is given back anyway.
func TestElectorStopDuringEpochWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpSetMetadata {
				return azleasetest.Fault{Action: azleasetest.Hang}
			}
			return azleasetest.Fault{}
		}))
		a, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{Identity: "a"})
		require.NoError(t, err)
		require.NoError(t, a.Start(context.Background(), nil))
		time.Sleep(time.Second)
		require.NoError(t, a.Stop(context.Background()))
		st, err := azlease.Inspect(context.Background(), e.client("x"), "leader")
		require.NoError(t, err)
		assert.False(t, st.Leased, "left %s", st.State)
	})
}

// TestElectorChangesReportOwnLoss: a leader cut off from storage loses its
// term; Changes says so (it no longer leads, the new leader not yet known),
// rather than still saying it leads.
func TestElectorChangesReportOwnLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		a := c.start("a", nil)
		c.waitLeader(time.Second)
		require.True(t, (<-a.Changes()).Self)
		c.partition("a", azleasetest.Hang)
		c.start("b", nil)
		time.Sleep(time.Minute)
		select {
		case info := <-a.Changes():
			assert.Equal(t, azlease.LeaderInfo{Epoch: epoch1}, info)
		default:
			t.Fatal("Changes still says a leads")
		}
		c.heal("a")
		time.Sleep(10 * time.Second)
		info := <-a.Changes()
		assert.Equal(t, "b", info.Holder, "its polls see the new leader once it can reach storage")
		c.stopAll()
	})
}

// TestElectorHealthAfterTaskReturnsAndWhileDraining: the health check stays
// green while the Elector waits a poll interval after its task returned, and
// while a stopping leader drains its task under a lease it still renews.
func TestElectorHealthAfterTaskReturnsAndWhileDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{PollInterval: 30 * time.Second, HeartbeatTimeout: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, el.Start(context.Background(), func(context.Context, *azlease.Term) error { return nil }))
		time.Sleep(20 * time.Second) // after the task returned, before contending again
		assert.False(t, el.IsLeader())
		require.NoError(t, el.Check())
		require.NoError(t, el.Stop(context.Background()))

		el2, err := azlease.NewElector(e.client("b"), "leader", &azlease.ElectorOptions{DrainTimeout: time.Minute, HeartbeatTimeout: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, el2.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			<-ctx.Done()
			time.Sleep(40 * time.Second) // a slow but finite drain
			return nil
		}))
		time.Sleep(time.Second)
		stopped := make(chan error)
		go func() { stopped <- el2.Stop(context.Background()) }()
		time.Sleep(35 * time.Second)
		require.NoError(t, el2.Check(), "draining, renewing, within DrainTimeout")
		require.NoError(t, <-stopped)
	})
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestElectorEpochSurvivesRecreatedBlob: the lock blob's container is
// deleted under a running election (storage restored, an in-memory emulator
// restarted). The leader learns it lost at its next renewal, an instance
// leads again, and the fencing epoch keeps growing, so the systems that
// fence by epoch keep accepting the new leaders. (Deleting a leased blob
// ends its lease at once: until the old leader's next renewal, two may
// believe they lead, which only fencing covers; the package doc says so.)
func TestElectorEpochSurvivesRecreatedBlob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		c.start("a", nil)
		c.start("b", nil)
		c.waitLeader(time.Second)
		for range 3 {
			time.Sleep(7 * time.Second)
			_, err := c.emu.client("op").Delete(raw(context.Background()), nil)
			require.NoError(t, err)
			time.Sleep(30 * time.Second)
			c.waitLeader(time.Minute)
		}
		c.stopAll()
		c.mu.Lock()
		terms := append([]believed(nil), c.terms...)
		c.mu.Unlock()
		sort.Slice(terms, func(i, j int) bool { return terms[i].start.Before(terms[j].start) })
		require.GreaterOrEqual(t, len(terms), 4)
		assert.Equal(t, epoch1, terms[0].epoch)
		for i := 1; i < len(terms); i++ {
			assert.Greater(t, terms[i].epoch, terms[i-1].epoch, "epochs grow across re-created blobs")
		}
	})
}
