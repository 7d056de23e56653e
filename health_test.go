package azlease_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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

// logBuffer is a concurrency-safe log sink for assertions on what an
// operator would see.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count returns how many lines contain all of parts.
func (l *logBuffer) count(parts ...string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func probe(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// authFailed answers every request as Azure answers a wrong account key.
func authFailed(azleasetest.Request) azleasetest.Fault {
	return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusForbidden, Code: "AuthenticationFailed"}
}

// TestElectorWrongKeyFailsAtOnce (issue 8, observation 1): with a wrong
// account key, an Elector used to follow for ever, healthy and silent. Now
// Run returns the permanent error after the first request, logged at Error,
// and Check and the health handler say why.
func TestElectorWrongKeyFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		e.SetFaults(authFailed)
		var logs logBuffer
		el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{Logger: logs.logger()})
		require.NoError(t, err)
		start := time.Now()
		err = el.Run(context.Background(), nil)
		require.ErrorIs(t, err, azlease.ErrPermanent)
		assert.Contains(t, err.Error(), "AuthenticationFailed")
		assert.Zero(t, time.Since(start), "within one request's time")
		assert.ErrorIs(t, el.Err(), azlease.ErrPermanent)
		assert.ErrorIs(t, el.Check(), azlease.ErrPermanent)
		code, body := probe(el.HealthHandler())
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Contains(t, body, "AuthenticationFailed")
		assert.Equal(t, 2, logs.count("level=ERROR"), "the refusal, and the elector stopping:\n%s", logs.String())
	})
}

// TestElectorUnreachableIsReported (issue 8, observation 1): with nothing
// answering, the Elector keeps trying, but says so: a Warn after a few
// failures (once), Check failing once every request has failed for longer
// than the lease duration, with the last error, and Run's error saying
// storage was never reached.
func TestElectorUnreachableIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := refusing()
		var logs logBuffer
		el, err := azlease.NewElector(failingClient(t, tr), "leader", &azlease.ElectorOptions{Logger: logs.logger()})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx, nil) }()

		time.Sleep(10 * time.Second)
		assert.Equal(t, 1, logs.count("level=WARN", "storage requests are failing", "connection refused"), logs.String())
		require.NoError(t, el.Check(), "not yet: shorter than a lease duration")
		time.Sleep(10 * time.Second)
		err = el.Check()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "connection refused")
		code, _ := probe(el.HealthHandler())
		assert.Equal(t, http.StatusServiceUnavailable, code)
		time.Sleep(time.Minute)
		assert.Equal(t, 1, logs.count("level=WARN"), "once per episode")

		cancel()
		err = <-done
		require.ErrorContains(t, err, "without ever reaching storage")
		assert.Contains(t, err.Error(), "connection refused")
	})
}

// TestElectorHealthStarting (issue 19 item 3): before any request has
// reached storage, the health handler says "starting" (200, so a liveness
// probe lets a fresh instance start), not "ok: following"; after a lease
// duration of failures it fails (503); once storage answers, "ok".
func TestElectorHealthStarting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		e.Partition("a", azleasetest.Blackhole)
		el, err := azlease.NewElector(e.client("a"), "leader", nil)
		require.NoError(t, err)
		require.NoError(t, el.Start(context.Background(), nil))

		time.Sleep(time.Second) // the first poll is still waiting
		code, body := probe(el.HealthHandler())
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "starting: has not reached storage yet\n", body)
		require.NoError(t, el.Check())

		time.Sleep(6 * time.Second)
		code, body = probe(el.HealthHandler())
		assert.Equal(t, http.StatusOK, code)
		assert.True(t, strings.HasPrefix(body, "starting: has not reached storage yet (1 request failed; last: azlease: transient failure (read locks/leader: context deadline exceeded)"), body)

		time.Sleep(15 * time.Second)
		code, body = probe(el.HealthHandler())
		assert.Equal(t, http.StatusServiceUnavailable, code, body)

		e.Heal("a")
		time.Sleep(10 * time.Second)
		code, body = probe(el.HealthHandler())
		assert.Equal(t, http.StatusOK, code)
		assert.True(t, strings.HasPrefix(body, "ok: leading, epoch "), body)
		require.NoError(t, el.Stop(context.Background()))
	})
}

// TestElectorOutageIsReportedAndRecovers: an Elector that worked meets an
// outage: one Warn, Check failing after a lease duration of failures, then
// recovery logged at Info and Check passing again. Follower health names the
// leader and its epoch.
func TestElectorOutageIsReportedAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		c.start("a", nil)
		c.waitLeader(time.Second)
		var logs logBuffer
		b := c.start("b", &azlease.ElectorOptions{Identity: "b", Logger: logs.logger()})
		time.Sleep(10 * time.Second)
		code, body := probe(b.HealthHandler())
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "ok: following a (epoch 946684800001)\n", body)

		c.partition("b", azleasetest.Drop)
		time.Sleep(30 * time.Second)
		assert.Equal(t, 1, logs.count("level=WARN", "storage requests are failing"), logs.String())
		require.Error(t, b.Check())
		c.heal("b")
		time.Sleep(10 * time.Second)
		require.NoError(t, b.Check())
		assert.Equal(t, 1, logs.count("level=INFO", "storage requests succeed again"), logs.String())
		assert.NoError(t, b.Err(), "it had reached storage: no start-up failure")
		c.stopAll()
	})
}

// TestElectorDeadlineLossIsWarn (issue 8, observation 5): losing leadership
// because the validity deadline passed is logged at Warn.
func TestElectorDeadlineLossIsWarn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		var logs logBuffer
		c.start("a", &azlease.ElectorOptions{Identity: "a", Logger: logs.logger()})
		c.waitLeader(time.Second)
		c.partition("a", azleasetest.Hang)
		time.Sleep(20 * time.Second)
		assert.Equal(t, 1, logs.count("level=WARN", "lost leadership", "validity deadline passed"), logs.String())
		c.stopAll()
	})
}

// TestMutexLockKeepsTheCause (issue 8, observations 2 and 3): with storage
// unreachable, Lock returns at its deadline with the refused connection in
// its error, and warns while it waits.
func TestMutexLockKeepsTheCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logBuffer
		m, err := azlease.NewMutex(failingClient(t, refusing()), "probe", &azlease.MutexOptions{Logger: logs.logger()})
		require.NoError(t, err)
		for _, d := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second} {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), d)
			_, err = m.Lock(ctx)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Contains(t, err.Error(), "connection refused", "the last attempt's error is kept")
			assert.Equal(t, d, time.Since(start), "returned at its deadline")
		}
		assert.Equal(t, 1, logs.count("level=WARN", "storage requests are failing"), "once per episode:\n%s", logs.String())
	})
}

// TestOneShotCallsAreBounded (issue 8, observation 3): TryLock, documented
// as never waiting, and Inspect retry an unreachable server only briefly
// (2 × AttemptTimeout), even without a deadline of their own.
func TestOneShotCallsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc := failingClient(t, refusing())
		m, err := azlease.NewMutex(cc, "probe", nil)
		require.NoError(t, err)
		start := time.Now()
		_, ok, err := m.TryLock(context.Background())
		require.False(t, ok)
		require.ErrorIs(t, err, azlease.ErrTransient)
		assert.Contains(t, err.Error(), "connection refused")
		assert.LessOrEqual(t, time.Since(start), 6*time.Second)

		start = time.Now()
		_, err = azlease.Inspect(context.Background(), cc, "probe")
		require.ErrorIs(t, err, azlease.ErrTransient)
		assert.LessOrEqual(t, time.Since(start), 6*time.Second)
	})
}

// TestPermanentFailuresSurfaceAtOnce: a wrong key makes Lock, TryLock,
// DoOnce and Inspect return a permanent error after one request.
func TestPermanentFailuresSurfaceAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		var requests atomic.Int64
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			requests.Add(1)
			return authFailed(r)
		})
		cc := e.client("a")
		m, err := azlease.NewMutex(cc, "m", nil)
		require.NoError(t, err)
		ctx := context.Background()
		start := time.Now()
		_, err = m.Lock(ctx)
		require.ErrorIs(t, err, azlease.ErrPermanent)
		_, _, err = m.TryLock(ctx)
		require.ErrorIs(t, err, azlease.ErrPermanent)
		_, err = azlease.DoOnce(ctx, cc, "k", nil, func(context.Context, azlease.Token) error { return nil })
		require.ErrorIs(t, err, azlease.ErrPermanent)
		_, err = azlease.Inspect(ctx, cc, "m")
		require.ErrorIs(t, err, azlease.ErrPermanent)
		assert.Zero(t, time.Since(start))
		assert.Equal(t, int64(4), requests.Load(), "one request each")
	})
}

// TestElectorStepsDownOnStall: with StepDownOnStall, a leader whose work
// stops sending heartbeats ends its term (cause ErrStalled) and releases the
// lease once the work returns, so a healthy instance takes over; without it,
// Check only fails.
func TestElectorStepsDownOnStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		var stalled atomic.Bool
		var causes []error
		var mu sync.Mutex
		task := func(ctx context.Context, term *azlease.Term) error {
			for {
				select {
				case <-ctx.Done():
					mu.Lock()
					causes = append(causes, context.Cause(ctx))
					mu.Unlock()
					return nil
				case <-time.After(time.Second):
					if !stalled.Load() {
						term.Heartbeat()
					}
				}
			}
		}
		start := func(name string) *azlease.Elector {
			el, err := azlease.NewElector(c.emu.client(name), "leader",
				&azlease.ElectorOptions{Identity: name, HeartbeatTimeout: 10 * time.Second, StepDownOnStall: true})
			require.NoError(t, err)
			require.NoError(t, el.Start(context.Background(), task))
			c.mu.Lock()
			c.nodes[name] = el
			c.mu.Unlock()
			return el
		}
		a := start("a")
		c.waitLeader(time.Second)
		b := start("b")
		time.Sleep(time.Minute)
		require.True(t, a.IsLeader(), "a healthy leader keeps leading")

		stalled.Store(true)
		stalledAt := time.Now()
		for deadline := time.Now().Add(time.Minute); !b.IsLeader(); time.Sleep(100 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "b never took over")
		}
		took := time.Since(stalledAt)
		assert.LessOrEqual(t, took, 10*time.Second+6*time.Second+time.Second, "HeartbeatTimeout + a poll interval (the stalled instance never re-acquires first)")
		mu.Lock()
		require.NotEmpty(t, causes)
		assert.ErrorIs(t, causes[0], azlease.ErrStalled)
		assert.ErrorIs(t, causes[0], azlease.ErrStopped)
		mu.Unlock()
		c.stopAll()

		_, err := azlease.NewElector(c.emu.client("x"), "leader", &azlease.ElectorOptions{StepDownOnStall: true})
		requireOptionError(t, err, "ElectorOptions.StepDownOnStall")
	})
}

// TestMutexMaxHold: a Lock held longer than MaxHold is taken away: its
// context ends (ErrMaxHoldExceeded), its lease is no longer renewed, and
// another process gets the mutex within the lease duration, although the
// holder never unlocks.
func TestMutexMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		a := newMutex(t, e, "a", "m", &azlease.MutexOptions{MaxHold: time.Minute})
		b := newMutex(t, e, "b", "m", &azlease.MutexOptions{PollInterval: 100 * time.Millisecond})
		la, err := a.Lock(context.Background())
		require.NoError(t, err)
		start := time.Now()
		<-la.Done()
		assert.Equal(t, time.Minute, time.Since(start))
		require.ErrorIs(t, la.Err(), azlease.ErrMaxHoldExceeded)
		require.ErrorIs(t, la.Err(), azlease.ErrLeaseLost)

		lb, err := b.Lock(context.Background())
		require.NoError(t, err)
		assert.LessOrEqual(t, time.Since(start), time.Minute+15*time.Second+200*time.Millisecond)
		require.ErrorIs(t, la.Unlock(context.Background()), azlease.ErrMaxHoldExceeded)
		assert.True(t, lb.Valid(), "a late Unlock does not touch the new holder")
		require.NoError(t, lb.Unlock(context.Background()))

		// Unlocked in time: no effect.
		la, err = a.Lock(context.Background())
		require.NoError(t, err)
		time.Sleep(30 * time.Second)
		require.NoError(t, la.Unlock(context.Background()))
		time.Sleep(time.Minute)

		_, err = azlease.NewMutex(e.client("x"), "m", &azlease.MutexOptions{MaxHold: -1})
		requireOptionError(t, err, "MutexOptions.MaxHold")
	})
}
