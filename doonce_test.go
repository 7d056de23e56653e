package azlease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// onceProbe is an fn that counts its runs and checks that no two overlap.
type onceProbe struct {
	runs, inside, completed atomic.Int32
	work                    time.Duration
	fail                    func(run int32) error
}

func (p *onceProbe) fn(t *testing.T) func(context.Context, azlease.Token) error {
	return func(ctx context.Context, tok azlease.Token) error {
		run := p.runs.Add(1)
		if p.inside.Add(1) != 1 {
			t.Error("fn is running twice at the same time")
		}
		defer p.inside.Add(-1)
		require.NotZero(t, tok.Epoch)
		select {
		case <-time.After(p.work):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if p.fail != nil {
			if err := p.fail(run); err != nil {
				return err
			}
		}
		p.completed.Add(1)
		return nil
	}
}

// TestDoOnceFiftyCallers: 50 callers, on 10 "processes", one key: fn
// completes once, never runs twice at once, and every caller returns knowing
// who did it.
func TestDoOnceFiftyCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		probe := &onceProbe{work: 40 * time.Second} // longer than a lease: renewed meanwhile
		var wg sync.WaitGroup
		results := make([]azlease.OnceResult, 50)
		for i := range 50 {
			proc := fmt.Sprintf("p%d", i%10)
			wg.Go(func() {
				res, err := azlease.DoOnce(context.Background(), e.client(proc), "deploy-42/migrate", &azlease.DoOnceOptions{Identity: proc}, probe.fn(t))

				require.NoError(t, err)
				results[i] = res
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), probe.runs.Load())
		ran := 0
		for _, r := range results {
			if r.Ran {
				ran++
			}
			assert.Equal(t, azlease.OnceDone, r.Status.State)
			assert.Equal(t, results[0].Status.Holder, r.Status.Holder, "everyone learns who did it")
			assert.Equal(t, 1, r.Status.Attempts)
		}
		assert.Equal(t, 1, ran)

		st, err := azlease.InspectOnce(context.Background(), e.client("x"), "deploy-42/migrate", nil)
		require.NoError(t, err)
		assert.Equal(t, azlease.OnceDone, st.State)
		assert.False(t, st.Locked)

		// A later caller returns at once.
		start := time.Now()
		res, err := azlease.DoOnce(context.Background(), e.client("late"), "deploy-42/migrate", nil, probe.fn(t))
		require.NoError(t, err)
		assert.False(t, res.Ran)
		assert.Zero(t, time.Since(start))
	})
}

// TestDoOnceRunnerCrash: the runner is cut off mid-fn. Its fn's context ends
// at its deadline; a waiter takes over when Azure's lease expires and
// completes on the second attempt. The cut-off runner cannot mark it done.
func TestDoOnceRunnerCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		var runnerCtxErr atomic.Value
		started := make(chan struct{})
		crashed := make(chan error, 1)
		go func() {
			_, err := azlease.DoOnce(context.Background(), c.emu.client("runner"), "init",

				&azlease.DoOnceOptions{Identity: "runner"}, func(ctx context.Context, tok azlease.Token) error {
					close(started)
					c.partition("runner", azleasetest.Hang)
					<-ctx.Done()
					runnerCtxErr.Store(context.Cause(ctx))
					return nil
				})

			crashed <- err
		}()
		<-started
		probe := &onceProbe{work: time.Second}
		res, err := azlease.DoOnce(context.Background(), c.emu.client("waiter"), "init", &azlease.DoOnceOptions{Identity: "waiter"}, probe.fn(t))
		require.NoError(t, err)
		assert.True(t, res.Ran)
		assert.Equal(t, 2, res.Status.Attempts, "the crashed attempt counts")
		assert.Equal(t, "waiter", res.Status.Holder)
		assert.ErrorIs(t, runnerCtxErr.Load().(error), azlease.ErrDeadlinePassed)

		c.heal("runner")
		err = <-crashed
		require.ErrorIs(t, err, azlease.ErrLeaseLost, "its completion was not recorded")
		st, err := azlease.InspectOnce(context.Background(), c.emu.client("x"), "init", nil)
		require.NoError(t, err)
		assert.Equal(t, "waiter", st.Holder)
	})
}

// TestDoOnceFailureIsRetried: fn fails twice; each failing caller gets its
// error, and a third caller completes it.
func TestDoOnceFailureIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		boom := errors.New("database not ready")
		probe := &onceProbe{work: time.Second, fail: func(run int32) error {
			if run <= 2 {
				return boom
			}
			return nil
		}}
		var wg sync.WaitGroup
		var failed, ran, waited atomic.Int32
		for i := range 6 {
			wg.Go(func() {
				res, err := azlease.DoOnce(context.Background(), e.client(fmt.Sprint(i)), "seed", nil, probe.fn(t))
				switch {
				case errors.Is(err, boom):
					failed.Add(1)
				case err != nil:
					t.Errorf("unexpected: %v", err)
				case res.Ran:
					ran.Add(1)
					assert.Equal(t, 3, res.Status.Attempts)
				default:
					waited.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(2), failed.Load())
		assert.Equal(t, int32(1), ran.Load())
		assert.Equal(t, int32(3), waited.Load())
		assert.Equal(t, int32(1), probe.completed.Load())
	})
}

// TestDoOnceFailureIsFinal: with MaxAttempts 1, the first failure is every
// caller's answer, until an operator resets the key.
func TestDoOnceFailureIsFinal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		opts := &azlease.DoOnceOptions{MaxAttempts: 1, Identity: "node-1"}
		boom := errors.New("schema conflict")
		probe := &onceProbe{work: time.Second, fail: func(int32) error { return boom }}
		var wg sync.WaitGroup
		errs := make([]error, 5)
		for i := range 5 {
			wg.Go(func() {
				_, errs[i] = azlease.DoOnce(context.Background(), e.client(fmt.Sprint(i)), "migrate", opts, probe.fn(t))
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), probe.runs.Load())
		var own int
		for _, err := range errs {
			if errors.Is(err, boom) {
				own++
				continue
			}
			var fe *azlease.OnceFailedError
			require.ErrorAs(t, err, &fe)
			require.ErrorIs(t, err, azlease.ErrOnceFailed)
			assert.Equal(t, 1, fe.Attempts)
			assert.Equal(t, "schema conflict", fe.LastError)
			assert.Equal(t, "node-1", fe.Holder)
		}
		assert.Equal(t, 1, own)

		st, err := azlease.InspectOnce(context.Background(), e.client("x"), "migrate", opts)
		require.NoError(t, err)
		assert.Equal(t, azlease.OnceFailed, st.State)

		require.NoError(t, azlease.ResetOnce(context.Background(), e.client("ops"), "migrate", opts))
		st, err = azlease.InspectOnce(context.Background(), e.client("x"), "migrate", opts)
		require.NoError(t, err)
		assert.Equal(t, azlease.OncePending, st.State)
		probe.fail = nil
		res, err := azlease.DoOnce(context.Background(), e.client("a"), "migrate", opts, probe.fn(t))
		require.NoError(t, err)
		assert.True(t, res.Ran, "runs again after a reset")
	})
}

// TestDoOnceStaleRunnerCannotMarkDone: the runner's lease is broken while fn
// runs and another process takes the key; when fn returns, the runner's
// attempt to mark done is rejected by Azure itself.
func TestDoOnceStaleRunnerCannotMarkDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		res, err := azlease.DoOnce(ctx, e.client("stale"), "k",

			nil, func(ctx context.Context, tok azlease.Token) error {

				_, err := newLease(t, e.client("op"), "once/k", nil).Break(ctx, 0)
				require.NoError(t, err)
				_, err = newLease(t, e.client("other"), "once/k", nil).Acquire(ctx)
				require.NoError(t, err)
				return nil
			})

		require.ErrorIs(t, err, azlease.ErrLeaseLost)
		assert.Contains(t, err.Error(), "could not be recorded")
		assert.False(t, res.Ran)
		st, err := azlease.InspectOnce(ctx, e.client("x"), "k", nil)
		require.NoError(t, err)
		assert.Equal(t, azlease.OnceRunning, st.State, "not marked done")
	})
}

func TestDoOnceWaiterCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		release := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := azlease.DoOnce(context.Background(), e.client("runner"), "k",

				nil, func(ctx context.Context, _ azlease.Token) error {
					<-release
					return nil
				})

			assert.NoError(t, err)
		}()
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := azlease.DoOnce(ctx, e.client("waiter"), "k",

			nil, func(context.Context, azlease.Token) error {
				t.Error("the waiter must not run fn")
				return nil
			})

		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 10*time.Second, time.Since(start))
		close(release)
		<-done
	})
}

func TestDoOnceManyKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		probes := make([]*onceProbe, 20)
		for k := range probes {
			probes[k] = &onceProbe{work: time.Duration(k) * time.Second}
		}
		var wg sync.WaitGroup
		for k := range probes {
			for p := range 5 {
				wg.Go(func() {
					_, err := azlease.DoOnce(context.Background(), e.client(fmt.Sprint(p)), fmt.Sprintf("key-%d", k), nil, probes[k].fn(t))
					require.NoError(t, err)
				})
			}
		}
		wg.Wait()
		for k, p := range probes {
			assert.Equal(t, int32(1), p.runs.Load(), "key %d", k)
		}
	})
}

// TestDoOnceCallerGivesUpMidRun: the runner's caller cancels; fn's context
// ends, and fn's own error comes back with the cancellation. That is not a
// failure of fn: the attempt does not count (even with MaxAttempts 1), the
// marker says what happened, and the next caller completes it.
func TestDoOnceCallerGivesUpMidRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		opts := &azlease.DoOnceOptions{MaxAttempts: 1, Identity: "a"}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := errors.New("migration interrupted")
		_, err := azlease.DoOnce(ctx, e.client("a"), "k",

			opts, func(ctx context.Context, _ azlease.Token) error {
				cancel()
				<-ctx.Done()
				return stopped
			})

		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, stopped, "fn's own error is kept")
		st, err := azlease.InspectOnce(context.Background(), e.client("x"), "k", opts)
		require.NoError(t, err)
		assert.Equal(t, azlease.OncePending, st.State)
		assert.Zero(t, st.Attempts)
		assert.Contains(t, st.LastError, "abandoned by its caller")

		res, err := azlease.DoOnce(context.Background(), e.client("b"), "k", opts, func(context.Context, azlease.Token) error { return nil })
		require.NoError(t, err)
		assert.True(t, res.Ran)
		assert.Equal(t, 1, res.Status.Attempts)
	})
}

func TestDoOnceRejectsBadInput(t *testing.T) {
	cc := containerAt(t, "locks")
	fn := func(context.Context, azlease.Token) error { return nil }
	ctx := context.Background()
	_, err := azlease.DoOnce(ctx, cc, "", nil, fn)
	requireOptionError(t, err, "key")
	_, err = azlease.DoOnce(ctx, cc, "ends-with/", nil, fn)
	requireOptionError(t, err, "key")
	_, err = azlease.DoOnce(ctx, cc, strings.Repeat("k", 1020), nil, fn)
	requireOptionError(t, err, "key")
	_, err = azlease.DoOnce(ctx, cc, "k", nil, nil)
	requireOptionError(t, err, "fn")
	_, err = azlease.DoOnce(ctx, nil, "k", nil, fn)
	requireOptionError(t, err, "container")
	_, err = azlease.DoOnce(ctx, cc, "k", &azlease.DoOnceOptions{MaxAttempts: -1}, fn)
	requireOptionError(t, err, "DoOnceOptions.MaxAttempts")
	_, err = azlease.DoOnce(ctx, cc, "k", &azlease.DoOnceOptions{LeaseDuration: 61 * time.Second}, fn)
	requireOptionError(t, err, "DoOnceOptions.LeaseDuration")
	_, err = azlease.DoOnce(ctx, cc, "k", &azlease.DoOnceOptions{PollInterval: math.MaxInt64, Jitter: -1}, fn)
	requireOptionError(t, err, "DoOnceOptions.PollInterval")
	_, err = azlease.DoOnce(ctx, cc, "k", &azlease.DoOnceOptions{PollInterval: time.Hour + 1}, fn)
	requireOptionError(t, err, "DoOnceOptions.PollInterval")
	_, err = azlease.InspectOnce(ctx, cc, "", nil)
	requireOptionError(t, err, "key")
	requireOptionError(t, azlease.ResetOnce(ctx, cc, "", nil), "key")
}

// TestDoOnceCompletedDespiteCancellation: fn completes although its caller
// cancelled meanwhile; the completion is recorded, and nobody runs it again.
func TestDoOnceCompletedDespiteCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx, cancel := context.WithCancel(context.Background())
		res, err := azlease.DoOnce(ctx, e.client("a"), "k",

			nil, func(context.Context, azlease.Token) error {
				cancel()
				return nil
			})

		require.NoError(t, err)
		assert.True(t, res.Ran)
		res, err = azlease.DoOnce(context.Background(), e.client("b"), "k",

			nil, func(context.Context, azlease.Token) error {
				t.Error("ran twice")
				return nil
			})

		require.NoError(t, err)
		assert.False(t, res.Ran)
	})
}

// TestDoOnceLastAttemptRunnerDies: the last allowed attempt's runner dies;
// the next caller records the failure instead of running a fourth attempt.
func TestDoOnceLastAttemptRunnerDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		opts := &azlease.DoOnceOptions{MaxAttempts: 2, Identity: "first"}
		_, err := azlease.DoOnce(context.Background(), c.emu.client("first"), "k",
			opts, func(context.Context, azlease.Token) error { return errors.New("flaky") })

		require.Error(t, err)
		started := make(chan struct{})
		died := make(chan error, 1)
		go func() { // the second and last attempt's runner is cut off mid-run
			_, err := azlease.DoOnce(context.Background(), c.emu.client("second"), "k",

				&azlease.DoOnceOptions{MaxAttempts: 2, Identity: "second"}, func(ctx context.Context, _ azlease.Token) error {
					close(started)
					c.partition("second", azleasetest.Hang)
					<-ctx.Done()
					return context.Cause(ctx)
				})

			died <- err
		}()
		<-started
		_, err = azlease.DoOnce(context.Background(), c.emu.client("third"), "k",

			&azlease.DoOnceOptions{MaxAttempts: 2, Identity: "third"}, func(context.Context, azlease.Token) error {
				t.Error("a third attempt ran")
				return nil
			})

		var fe *azlease.OnceFailedError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, 2, fe.Attempts)
		assert.Contains(t, fe.LastError, "did not finish attempt 2")
		c.heal("second")
		require.ErrorIs(t, <-died, azlease.ErrLeaseLost)
	})
}

// TestDoOnceLostLeaseAndFailedFn: fn fails after its lease was lost; the
// caller gets fn's error, and the failure is not recorded (it could not be).
func TestDoOnceLostLeaseAndFailedFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		boom := errors.New("boom")
		_, err := azlease.DoOnce(context.Background(), c.emu.client("a"), "k",

			nil, func(ctx context.Context, _ azlease.Token) error {
				c.partition("a", azleasetest.Hang)
				<-ctx.Done()
				c.heal("a")
				return boom
			})

		require.ErrorIs(t, err, boom)
		st, err := azlease.InspectOnce(context.Background(), c.emu.client("x"), "k", nil)
		require.NoError(t, err)
		assert.Equal(t, azlease.OnceRunning, st.State, "the failure could not be recorded without the lease")
	})
}

// TestDoOnceFailureReturnsTheMarker: the caller whose fn failed gets the
// marker as it recorded the failure, and the times a runner and a waiter
// see are equal (no monotonic reading on the runner's copy).
func TestDoOnceFailureReturnsTheMarker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		boom := errors.New("boom")
		res, err := azlease.DoOnce(context.Background(), e.client("a"), "k", &azlease.DoOnceOptions{Identity: "a"},
			func(context.Context, azlease.Token) error { return boom })
		require.ErrorIs(t, err, boom)
		assert.False(t, res.Ran)
		assert.Equal(t, azlease.OnceFailed, res.Status.State)
		assert.Equal(t, 1, res.Status.Attempts)
		assert.Equal(t, "a", res.Status.Holder)
		assert.Equal(t, "boom", res.Status.LastError)

		st, err := azlease.InspectOnce(context.Background(), e.client("b"), "k", nil)
		require.NoError(t, err)
		assert.Equal(t, res.Status.Time, st.Time)
		assert.Equal(t, res.Status.Time.String(), st.Time.String(), "no monotonic reading")

		res, err = azlease.DoOnce(context.Background(), e.client("a"), "k", nil, func(context.Context, azlease.Token) error { return nil })
		require.NoError(t, err)
		require.True(t, res.Ran)
		st, err = azlease.InspectOnce(context.Background(), e.client("b"), "k", nil)
		require.NoError(t, err)
		assert.Equal(t, res.Status.Time.String(), st.Time.String())
	})
}
