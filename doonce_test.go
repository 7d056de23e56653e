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

// doneWriteLost returns a fault hook that loses the answer of client's
// first write marking a DoOnce key done (the write is applied), and from
// then on cuts client off (its requests hang) until heal is closed. dropped
// is closed when the write is applied.
func doneWriteLost(client string, dropped, heal chan struct{}) azleasetest.FaultFunc {
	return markerWriteLost(client, azlease.OnceDone, dropped, heal)
}

// markerWriteLost is doneWriteLost for the first write of a marker in state.
func markerWriteLost(client string, state azlease.OnceState, dropped, heal chan struct{}) azleasetest.FaultFunc {
	var once sync.Once
	return func(r azleasetest.Request) azleasetest.Fault {
		if r.Client != client {
			return azleasetest.Fault{}
		}
		select {
		case <-dropped:
			select {
			case <-heal:
				return azleasetest.Fault{}
			default:
				return azleasetest.Fault{Action: azleasetest.Hang}
			}
		default:
		}
		if r.Op == azleasetest.OpSetMetadata && r.Header.Get("X-Ms-Meta-Azleaseoncestate") == string(state) {
			f := azleasetest.Fault{}
			once.Do(func() {
				f = azleasetest.Fault{Action: azleasetest.ApplyThenDrop}
				close(dropped)
			})
			return f
		}
		return azleasetest.Fault{}
	}
}

// TestDoOnceDoneWriteAnswerLost is issue 19's scenario: the runner's write
// marking the key done is applied but its answer is lost, and the runner
// stays cut off from storage until after its lease's deadline. It used to
// return "completion could not be recorded" with Ran false while the marker
// said done by it, so no caller ever got Ran true. Now it settles the
// outcome once storage answers again (it releases its lease ID, then reads
// the marker) and returns Ran true; the waiter learns the key is done.
func TestDoOnceDoneWriteAnswerLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		dropped, heal := make(chan struct{}), make(chan struct{})
		e.SetFaults(doneWriteLost("runner", dropped, heal))
		var tok azlease.Token
		var runs atomic.Int32
		type result struct {
			res azlease.OnceResult
			err error
		}
		runner := make(chan result, 1)
		go func() {
			res, err := azlease.DoOnce(context.Background(), e.client("runner"), "migrate", &azlease.DoOnceOptions{Identity: "runner"},
				func(_ context.Context, tk azlease.Token) error {
					runs.Add(1)
					tok = tk
					time.Sleep(20 * time.Second) // renewed meanwhile
					return nil
				})
			runner <- result{res, err}
		}()
		waiter := make(chan result, 1)
		go func() {
			time.Sleep(time.Second)
			res, err := azlease.DoOnce(context.Background(), e.client("waiter"), "migrate", &azlease.DoOnceOptions{Identity: "waiter"},
				func(context.Context, azlease.Token) error {
					runs.Add(1)
					return nil
				})
			waiter <- result{res, err}
		}()

		<-dropped
		dropAt := time.Now()
		time.Sleep(20 * time.Second) // past the runner's validity deadline (at most 14.25 s after its last renewal)
		close(heal)

		r := <-runner
		require.NoError(t, r.err)
		assert.True(t, r.res.Ran, "the marker says done by this runner's term")
		assert.Equal(t, azlease.OnceDone, r.res.Status.State)
		assert.Equal(t, "runner", r.res.Status.Holder)
		assert.Equal(t, tok.Epoch, r.res.Status.Epoch)
		assert.Less(t, time.Since(dropAt), 30*time.Second, "it answers soon after storage answers again")

		w := <-waiter
		require.NoError(t, w.err)
		assert.False(t, w.res.Ran)
		assert.Equal(t, "runner", w.res.Status.Holder)
		assert.Equal(t, int32(1), runs.Load())

		st, err := azlease.InspectOnce(context.Background(), e.client("x"), "migrate", nil)
		require.NoError(t, err)
		assert.Equal(t, azlease.OnceDone, st.State)
		assert.Equal(t, tok.Epoch, st.Epoch)
		assert.False(t, st.Locked, "the runner released its lease")
	})
}

// TestDoOnceDoneWriteUnknownUntilUnreachable: as above, but storage stays
// unreachable: the runner says its completion may not have been recorded,
// with an error wrapping ErrUnreachable (and so ErrTransient) that names the
// endpoint, once every request has failed for UnreachableTimeout; or, when
// ctx ends first, with ctx's error. It was in fact recorded, which a read
// afterwards shows.
func TestDoOnceDoneWriteUnknownUntilUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    azlease.DoOnceOptions
		ctx     time.Duration // 0: context.Background()
		wantErr error
		within  time.Duration // after the write was applied
	}{
		{name: "default bound", wantErr: azlease.ErrUnreachable, within: 80 * time.Second},
		{name: "10s bound", opts: azlease.DoOnceOptions{UnreachableTimeout: 10 * time.Second}, wantErr: azlease.ErrUnreachable, within: 30 * time.Second},
		{name: "no bound, ctx ends", opts: azlease.DoOnceOptions{UnreachableTimeout: -1}, ctx: 3 * time.Minute, wantErr: context.DeadlineExceeded, within: 3 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				dropped, heal := make(chan struct{}), make(chan struct{})
				e.SetFaults(doneWriteLost("runner", dropped, heal))
				ctx := context.Background()
				if tc.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.ctx)
					defer cancel()
				}
				dropAt := make(chan time.Time, 1)
				go func() {
					<-dropped
					dropAt <- time.Now()
				}()
				opts := tc.opts
				opts.Identity = "runner"
				res, err := azlease.DoOnce(ctx, e.client("runner"), "migrate", &opts, func(context.Context, azlease.Token) error { return nil })
				require.ErrorIs(t, err, tc.wantErr)
				require.ErrorIs(t, err, azlease.ErrTransient)
				assert.ErrorContains(t, err, "may not have been recorded")
				if tc.wantErr == azlease.ErrUnreachable {
					assert.ErrorContains(t, err, "http://127.0.0.1:10000/")
				}
				assert.False(t, res.Ran)
				assert.LessOrEqual(t, time.Since(<-dropAt), tc.within)
				close(heal)

				st, err := azlease.InspectOnce(context.Background(), e.client("x"), "migrate", nil)
				require.NoError(t, err)
				assert.Equal(t, azlease.OnceDone, st.State, "it had been recorded; the runner could not know")
			})
		})
	}
}

// TestDoOnceLostClaimIsNotAnAttempt: the runner's write claiming the first
// attempt ("running") is applied but its answer is lost, and the runner is
// cut off until its lease's deadline, so fn never runs. When the same call
// takes the key again, its own unstarted claim does not count: with
// MaxAttempts 1, fn still runs (it used to fail the key for good, "the
// runner did not finish attempt 1").
func TestDoOnceLostClaimIsNotAnAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		dropped, heal := make(chan struct{}), make(chan struct{})
		e.SetFaults(markerWriteLost("runner", azlease.OnceRunning, dropped, heal))
		go func() {
			<-dropped
			time.Sleep(20 * time.Second)
			close(heal)
		}()
		var runs atomic.Int32
		res, err := azlease.DoOnce(context.Background(), e.client("runner"), "k", &azlease.DoOnceOptions{MaxAttempts: 1, Identity: "runner"},
			func(context.Context, azlease.Token) error {
				runs.Add(1)
				return nil
			})
		require.NoError(t, err)
		assert.True(t, res.Ran)
		assert.Equal(t, 1, res.Status.Attempts)
		assert.Equal(t, int32(1), runs.Load())
	})
}

// TestDoOnceMaxAttemptsIsTheFirstCallers (issue 18 §4): the limit is
// recorded with a key's first attempt, and a later caller with a larger
// MaxAttempts does not rerun a key that failed for good under the smaller
// one; it gets a *OnceFailedError saying which limit applied, and a Warn.
// A later caller with a smaller one still gets the recorded, larger limit.
// ResetOnce clears the limit with the marker.
func TestDoOnceMaxAttemptsIsTheFirstCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		boom := errors.New("boom")
		var runs atomic.Int32
		fail := func(context.Context, azlease.Token) error {
			runs.Add(1)
			return boom
		}
		_, err := azlease.DoOnce(ctx, e.client("a"), "small", &azlease.DoOnceOptions{MaxAttempts: 1, Identity: "a"}, fail)
		require.ErrorIs(t, err, boom)
		st, err := azlease.InspectOnce(ctx, e.client("x"), "small", nil)
		require.NoError(t, err)
		assert.Equal(t, 1, st.MaxAttempts)

		var logs logBuffer
		_, err = azlease.DoOnce(ctx, e.client("b"), "small", &azlease.DoOnceOptions{MaxAttempts: 5, Logger: logs.logger()}, fail)
		var fe *azlease.OnceFailedError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, 1, fe.Attempts)
		assert.Equal(t, 1, fe.MaxAttempts)
		assert.Equal(t, 5, fe.CallerMaxAttempts)
		assert.Equal(t, `azlease: once "small" failed after 1 attempt (MaxAttempts 1, recorded with the key's first attempt; this caller's 5 does not apply); last by a: boom`, err.Error())
		assert.Equal(t, int32(1), runs.Load(), "not rerun")
		assert.Equal(t, 1, logs.count("level=WARN", "recorded=1", "caller=5"), logs.String())

		// The other way round: recorded 3, a caller with 1 still retries.
		for i := range 2 {
			_, err = azlease.DoOnce(ctx, e.client("a"), "large", &azlease.DoOnceOptions{MaxAttempts: 3 - 2*i}, fail)
			require.ErrorIs(t, err, boom)
		}
		st, err = azlease.InspectOnce(ctx, e.client("x"), "large", nil)
		require.NoError(t, err)
		assert.Equal(t, 2, st.Attempts)
		assert.Equal(t, 3, st.MaxAttempts)
		_, err = azlease.DoOnce(ctx, e.client("a"), "large", nil, fail)
		require.ErrorIs(t, err, boom)
		_, err = azlease.DoOnce(ctx, e.client("a"), "large", nil, fail)
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, `azlease: once "large" failed after 3 attempts (MaxAttempts 3); last by `+fe.Holder+`: boom`, err.Error())

		require.NoError(t, azlease.ResetOnce(ctx, e.client("op"), "small", nil))
		st, err = azlease.InspectOnce(ctx, e.client("x"), "small", nil)
		require.NoError(t, err)
		assert.Equal(t, azlease.OnceStatus{State: azlease.OncePending}, st, "the limit is cleared with the marker")
		res, err := azlease.DoOnce(ctx, e.client("b"), "small", &azlease.DoOnceOptions{MaxAttempts: 5}, func(context.Context, azlease.Token) error { return nil })
		require.NoError(t, err)
		assert.True(t, res.Ran)
		assert.Equal(t, 5, res.Status.MaxAttempts)
	})
}

// TestResetOnceNothingToReset (issue 18 §4): ResetOnce of a key that was
// never used creates nothing (no container, no blob) and says there was
// nothing to reset; so does a second reset.
func TestResetOnceNothingToReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc, err := e.ContainerClient("nocontainer", "op")
		require.NoError(t, err)
		err = azlease.ResetOnce(ctx, cc, "k", nil)
		require.ErrorIs(t, err, azlease.ErrNothingToReset)
		assert.ErrorContains(t, err, "k")
		_, err = cc.GetProperties(raw(ctx), nil)
		require.Error(t, err, "the container was not created")

		err = azlease.ResetOnce(ctx, e.client("op"), "k", nil)
		require.ErrorIs(t, err, azlease.ErrNothingToReset)
		st, err := azlease.Inspect(ctx, e.client("x"), "once/k")
		require.NoError(t, err)
		assert.False(t, st.Exists, "the marker blob was not created")

		_, err = azlease.DoOnce(ctx, e.client("a"), "k", nil, func(context.Context, azlease.Token) error { return nil })
		require.NoError(t, err)
		require.NoError(t, azlease.ResetOnce(ctx, e.client("op"), "k", nil))
		require.ErrorIs(t, azlease.ResetOnce(ctx, e.client("op"), "k", nil), azlease.ErrNothingToReset, "already reset")
	})
}

// TestDoOnceSettleReleasesBeforeTrustingARead: a read of the marker is not
// final while the runner's lease ID may still act. Here the runner's first
// renewal and its write marking the key done both get no answer and arrive
// late, and the runner is cut off past its deadline. When it can reach
// storage again its lease has expired and the marker says running; but the
// late renewal revives the expired lease (Azure renews an expired lease for
// its ID if nobody leased the blob since), and the late write then marks the
// key done. Trusting that first read would answer "not recorded" for a key
// that ends up done by this runner, with no Ran true anywhere (here the
// runner's releases fail until 30 s in, so that it cannot release the ID
// before the late requests arrive). Releasing the lease ID before trusting
// a read makes the answer and the marker agree whatever lands when: here
// the late write marks the key done, and the runner, still trying to
// release, then reads that and answers Ran true.
func TestDoOnceSettleReleasesBeforeTrustingARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		t0 := time.Now()
		var renewed, doneSent, cut atomic.Bool
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Client != "runner" {
				return azleasetest.Fault{}
			}
			switch {
			case r.Op == azleasetest.OpRenewLease && renewed.CompareAndSwap(false, true):
				cut.Store(true)
				return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: 18 * time.Second} // given up 5.5 to 6 s in: lands by 24 s
			case r.Op == azleasetest.OpSetMetadata && r.Header.Get("X-Ms-Meta-Azleaseoncestate") == "done" && doneSent.CompareAndSwap(false, true):
				return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: 20 * time.Second} // sent 6 s in, given up at 9 s: lands 29 s in
			case cut.Load() && time.Since(t0) < 18*time.Second:
				return azleasetest.Fault{Action: azleasetest.Hang}
			case r.Op == azleasetest.OpReleaseLease && time.Since(t0) < 30*time.Second:
				return azleasetest.Fault{Action: azleasetest.Fail} // 503: released only later
			}
			return azleasetest.Fault{}
		})
		res, err := azlease.DoOnce(context.Background(), e.client("runner"), "k", &azlease.DoOnceOptions{Identity: "runner"},
			func(context.Context, azlease.Token) error {
				time.Sleep(6 * time.Second) // after the first renewal (2.5 to 5 s in)
				return nil
			})
		require.True(t, doneSent.Load())
		time.Sleep(time.Until(t0.Add(time.Minute))) // every late request has landed, or failed
		st, ierr := azlease.InspectOnce(context.Background(), e.client("x"), "k", nil)
		require.NoError(t, ierr)
		if st.State == azlease.OnceDone {
			require.NoError(t, err)
			assert.True(t, res.Ran, "the marker says done by this runner: it must say Ran")
		} else {
			require.ErrorContains(t, err, "could not be recorded")
			assert.False(t, res.Ran)
		}
		assert.Equal(t, azlease.OnceDone, st.State, "the late write landed before the release")
	})
}

// TestDoOnceCompletionNeverHidden is issue 24's second safety item: a call
// whose fn returned nil returns Ran true, or an error wrapping
// ErrOnceUnrecorded; never a plain "done elsewhere" (Ran false, nil) and
// never a bare loss. Each case is one way a completion goes unrecorded:
//   - overtaken: the runner's done write is not applied (its connection
//     drops) and the runner stays cut off past its lease; a waiter takes
//     over, runs fn and marks the key done; the first runner, settling,
//     reads the other's done marker (fn ran twice: it must learn that);
//   - lost: the runner's renewals hang until its deadline while fn still
//     runs; fn then returns nil in a term already lost;
//   - not recorded: the done write is refused for good (the lease is
//     broken by an operator between fn's end and the write).
func TestDoOnceCompletionNeverHidden(t *testing.T) {
	t.Run("overtaken", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEmu(t)
			var cut, healed atomic.Bool
			e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
				switch {
				case r.Client != "runner" || healed.Load():
					return azleasetest.Fault{}
				case cut.Load():
					return azleasetest.Fault{Action: azleasetest.Hang}
				case r.Op == azleasetest.OpSetMetadata && r.Header.Get("X-Ms-Meta-Azleaseoncestate") == string(azlease.OnceDone):
					cut.Store(true)
					return azleasetest.Fault{Action: azleasetest.Drop} // not applied
				}
				return azleasetest.Fault{}
			})
			var runs atomic.Int32
			waiterDone := make(chan azlease.OnceResult, 1)
			go func() {
				time.Sleep(time.Second)
				res, err := azlease.DoOnce(context.Background(), e.client("waiter"), "k", &azlease.DoOnceOptions{Identity: "waiter"},
					func(context.Context, azlease.Token) error { runs.Add(1); return nil })
				assert.NoError(t, err)
				waiterDone <- res
			}()
			go func() {
				w := <-waiterDone // the waiter completed the key: heal the runner
				assert.True(t, w.Ran)
				healed.Store(true)
				waiterDone <- w
			}()
			res, err := azlease.DoOnce(context.Background(), e.client("runner"), "k", &azlease.DoOnceOptions{Identity: "runner"},
				func(context.Context, azlease.Token) error { runs.Add(1); return nil })
			require.Equal(t, int32(2), runs.Load(), "fn ran in both calls")
			require.ErrorIs(t, err, azlease.ErrOnceUnrecorded, "its completion must not be hidden as done elsewhere")
			assert.ErrorContains(t, err, "ran twice")
			assert.False(t, res.Ran)
			assert.Equal(t, "waiter", res.Status.Holder, "the marker that was recorded")
			<-waiterDone
		})
	})
	t.Run("lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEmu(t)
			var cut atomic.Bool
			e.SetFaults(faultsFor("runner", func(r azleasetest.Request) azleasetest.Fault {
				if cut.Load() {
					return azleasetest.Fault{Action: azleasetest.Hang}
				}
				return azleasetest.Fault{}
			}))
			res, err := azlease.DoOnce(context.Background(), e.client("runner"), "k", &azlease.DoOnceOptions{Identity: "runner"},
				func(ctx context.Context, _ azlease.Token) error {
					cut.Store(true)
					<-ctx.Done() // the lease is lost at its deadline
					cut.Store(false)
					return nil // and fn says it completed anyway
				})
			require.ErrorIs(t, err, azlease.ErrOnceUnrecorded)
			require.ErrorIs(t, err, azlease.ErrLeaseLost, "with the cause")
			assert.False(t, res.Ran)
		})
	})
	t.Run("not recorded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEmu(t)
			operator := newLease(t, e.client("operator"), "once/k", nil)
			res, err := azlease.DoOnce(context.Background(), e.client("runner"), "k", &azlease.DoOnceOptions{Identity: "runner"},
				func(ctx context.Context, _ azlease.Token) error {
					_, err := operator.Break(context.Background(), 0)
					require.NoError(t, err)
					return nil
				})
			require.ErrorIs(t, err, azlease.ErrOnceUnrecorded)
			assert.False(t, res.Ran)
			st, ierr := azlease.InspectOnce(context.Background(), e.client("x"), "k", nil)
			require.NoError(t, ierr)
			assert.NotEqual(t, azlease.OnceDone, st.State)
		})
	})
}

// TestDoOnceLateAcquireCannotRevealUnrecordedCompletion closes the hole
// issue 22's note left open: an acquisition attempt whose answer is lost
// (to be applied 10 s after the runner gave up on it) and a done write
// applied late too. The runner used to retry the acquisition with the same
// lease ID, so its term ran under that ID; settling released it and read
// "not recorded", and then the late acquisition granted the ID again and
// the late done write landed: the key was done in the runner's term after
// the runner had said its completion could not be recorded. Now the retry
// proposes a fresh ID, the late acquisition grants an ID no write carries,
// and the answer stays true.
func TestDoOnceLateAcquireCannotRevealUnrecordedCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		setup := newLease(t, e.client("setup"), "once/k", nil) // the blob exists, free
		_, err := setup.Acquire(context.Background())
		require.NoError(t, err)
		require.NoError(t, setup.Release(context.Background()))
		var acquires, dones atomic.Int32
		e.SetFaults(faultsFor("runner", func(r azleasetest.Request) azleasetest.Fault {
			switch {
			case r.Op == azleasetest.OpAcquireLease && acquires.Add(1) == 1:
				// Given up after 3 s, applied at 23 s: after the release.
				return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: 20 * time.Second}
			case r.Op == azleasetest.OpSetMetadata && r.Header.Get("X-Ms-Meta-Azleaseoncestate") == string(azlease.OnceDone):
				if dones.Add(1) == 1 {
					// Applied 25 s after the runner gave up on it: after
					// the late acquisition.
					return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: 25 * time.Second}
				}
				return azleasetest.Fault{Action: azleasetest.Hang}
			}
			return azleasetest.Fault{}
		}))
		res, err := azlease.DoOnce(context.Background(), e.client("runner"), "k", &azlease.DoOnceOptions{Identity: "runner"},
			func(context.Context, azlease.Token) error { return nil })
		require.ErrorIs(t, err, azlease.ErrOnceUnrecorded)
		require.ErrorContains(t, err, "could not be recorded")
		assert.False(t, res.Ran)
		time.Sleep(time.Minute) // every late request has landed
		st, ierr := azlease.InspectOnce(context.Background(), e.client("x"), "k", nil)
		require.NoError(t, ierr)
		assert.NotEqual(t, azlease.OnceDone, st.State, "the runner said its completion could not be recorded, and then it was")
	})
}

// TestDoOnceStopDuringOutageIsBounded: the caller's ctx ends while fn runs
// (a stopping process) and storage stops answering; whether fn then
// completes or fails, DoOnce returns within 2 × AttemptTimeout of fn's
// return, not after the lease's validity or UnreachableTimeout (issue 24,
// item 9, for azlease once).
func TestDoOnceStopDuringOutageIsBounded(t *testing.T) {
	for _, fnErr := range []error{nil, errors.New("interrupted")} {
		t.Run(fmt.Sprint(fnErr), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx, cancel := context.WithCancel(context.Background())
				var returned time.Time
				_, err := azlease.DoOnce(ctx, e.client("runner"), "k", &azlease.DoOnceOptions{Identity: "runner"},
					func(context.Context, azlease.Token) error {
						e.Partition("runner", azleasetest.Blackhole)
						cancel() // a signal: the caller is stopping
						returned = time.Now()
						return fnErr
					})
				require.Error(t, err)
				took := time.Since(returned)
				assert.LessOrEqual(t, took, 6*time.Second, "2 × AttemptTimeout after fn returned")
				if fnErr == nil {
					assert.ErrorIs(t, err, azlease.ErrOnceUnrecorded, "fn completed, its completion not known to be recorded")
				}
				t.Logf("returned %v after fn: %v", took, err)
			})
		})
	}
}
