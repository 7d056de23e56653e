package azlease_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestZeroMutexFailsWithAnError: a Mutex not made by NewMutex (zero or nil)
// returns ErrNotInitialized, naming the constructor, instead of panicking.
func TestZeroMutexFailsWithAnError(t *testing.T) {
	ctx := context.Background()
	for name, m := range map[string]*azlease.Mutex{"zero": new(azlease.Mutex), "nil": nil} {
		t.Run(name, func(t *testing.T) {
			lock, ok, err := m.TryLock(ctx)
			require.ErrorIs(t, err, azlease.ErrNotInitialized)
			assert.ErrorContains(t, err, "use NewMutex")
			assert.False(t, ok)
			assert.Nil(t, lock)

			lock, err = m.Lock(ctx)
			require.ErrorIs(t, err, azlease.ErrNotInitialized)
			assert.Nil(t, lock)

			err = m.Do(ctx, func(context.Context, *azlease.Lock) error {
				t.Error("fn ran on a zero Mutex")
				return nil
			})
			require.ErrorIs(t, err, azlease.ErrNotInitialized)
		})
	}
}

// TestZeroElectorFailsWithAnError: every method of an Elector not made by
// NewElector (zero or nil) returns ErrNotInitialized or a safe value; Start
// used to crash the process from the Elector's own goroutine.
func TestZeroElectorFailsWithAnError(t *testing.T) {
	ctx := context.Background()
	for name, e := range map[string]*azlease.Elector{"zero": new(azlease.Elector), "nil": nil} {
		t.Run(name, func(t *testing.T) {
			err := e.Start(ctx, nil)
			require.ErrorIs(t, err, azlease.ErrNotInitialized)
			assert.ErrorContains(t, err, "use NewElector")
			require.ErrorIs(t, e.Run(ctx, nil), azlease.ErrNotInitialized)
			require.ErrorIs(t, e.Stop(ctx), azlease.ErrNotInitialized)
			_, err = e.Leader(ctx)
			require.ErrorIs(t, err, azlease.ErrNotInitialized)
			require.ErrorIs(t, e.Check(), azlease.ErrNotInitialized)

			rec := httptest.NewRecorder()
			e.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Contains(t, rec.Body.String(), "NewElector")

			assert.False(t, e.IsLeader())
			assert.Nil(t, e.Term())
			assert.Empty(t, e.Identity())
			select {
			case <-e.Done():
			default:
				t.Error("Done is not closed")
			}
			_, open := <-e.Changes()
			assert.False(t, open, "Changes is closed")
		})
	}
}

// TestDoOnceCorruptMarker: a marker whose attempt count is negative or huge
// (foreign or damaged metadata) used to overflow Attempts+1 and disable
// MaxAttempts (fn ran 4 times with MaxAttempts 3); a recorded limit outside
// 1 to 1000 is corrupt too. Now every DoOnce and
// InspectOnce on the key fails with a permanent error that says to run
// ResetOnce, fn never runs, and after ResetOnce MaxAttempts holds.
func TestDoOnceCorruptMarker(t *testing.T) {
	for _, bad := range []map[string]string{
		{"azleaseoncestate": "failed", "azleaseonceattempts": "-1"},
		{"azleaseoncestate": "pending", "azleaseonceattempts": "9223372036854775807"},
		{"azleaseoncestate": "failed", "azleaseonceattempts": "-9223372036854775808"},
		{"azleaseoncestate": "finished", "azleaseonceattempts": "1"},
		{"azleaseoncestate": "failed", "azleaseonceattempts": "1", "azleaseoncemaxattempts": "0"},
		{"azleaseoncestate": "failed", "azleaseonceattempts": "1", "azleaseoncemaxattempts": "1001"},
	} {
		t.Run(bad["azleaseoncestate"]+"/"+bad["azleaseonceattempts"], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				cc := e.client("op")
				_, err := cc.Create(raw(ctx), nil)
				require.NoError(t, err)
				md := map[string]*string{}
				for k, v := range bad {
					md[k] = &v
				}
				_, err = cc.NewBlockBlobClient("once/k").UploadBuffer(raw(ctx), nil, &blockblob.UploadBufferOptions{Metadata: md})
				require.NoError(t, err)

				var runs atomic.Int32
				boom := errors.New("boom")
				fn := func(context.Context, azlease.Token) error {
					runs.Add(1)
					return boom
				}
				opts := &azlease.DoOnceOptions{MaxAttempts: 3}
				for range 2 {
					_, err = azlease.DoOnce(ctx, e.client("a"), "k", opts, fn)
					require.ErrorIs(t, err, azlease.ErrPermanent)
					require.ErrorIs(t, err, azlease.ErrOnceCorrupt)
					assert.ErrorContains(t, err, "ResetOnce")
				}
				_, err = azlease.InspectOnce(ctx, e.client("a"), "k", opts)
				require.ErrorIs(t, err, azlease.ErrOnceCorrupt)
				assert.Zero(t, runs.Load(), "fn never runs on a corrupt marker")

				require.NoError(t, azlease.ResetOnce(ctx, e.client("op"), "k", opts))
				st, err := azlease.InspectOnce(ctx, e.client("a"), "k", opts)
				require.NoError(t, err)
				assert.Equal(t, azlease.OncePending, st.State)

				var fe *azlease.OnceFailedError
				for i := 0; i < 10 && !errors.As(err, &fe); i++ {
					_, err = azlease.DoOnce(ctx, e.client("a"), "k", opts, fn)
				}
				require.ErrorAs(t, err, &fe)
				assert.Equal(t, 3, fe.Attempts)
				assert.Equal(t, int32(3), runs.Load(), "MaxAttempts holds")
			})
		})
	}
}

// TestDoOnceMarkerPastMaxAttempts: a valid pending marker that already
// records MaxAttempts attempts (written by another tool, or under a larger
// MaxAttempts) fails instead of running one more attempt.
func TestDoOnceMarkerPastMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("op")
		_, err := cc.Create(raw(ctx), nil)
		require.NoError(t, err)
		state, attempts := "pending", "5"
		_, err = cc.NewBlockBlobClient("once/k").UploadBuffer(raw(ctx), nil, &blockblob.UploadBufferOptions{
			Metadata: map[string]*string{"azleaseoncestate": &state, "azleaseonceattempts": &attempts}})
		require.NoError(t, err)
		_, err = azlease.DoOnce(ctx, e.client("a"), "k",

			nil, func(context.Context, azlease.Token) error {
				t.Error("fn ran a sixth attempt with MaxAttempts 3")
				return nil
			})

		var fe *azlease.OnceFailedError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, 5, fe.Attempts)
	})
}

// TestElectorRecoversTaskPanic: a leader task that panics does not crash the
// process: the panic is logged with its stack, the term ends with a
// *PanicError as its cause, the lease is released, and Run returns the
// *PanicError (AfterTask StopElecting).
func TestElectorRecoversTaskPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		var log syncBuffer
		boom := errors.New("boom")
		el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{
			AfterTask: azlease.StopElecting, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		})
		require.NoError(t, err)
		var term *azlease.Term
		err = el.Run(context.Background(), func(ctx context.Context, tm *azlease.Term) error {
			term = tm
			time.Sleep(20 * time.Second) // work, renewing meanwhile
			panic(boom)
		})
		var pe *azlease.PanicError
		require.ErrorAs(t, err, &pe)
		require.ErrorIs(t, err, boom, "Unwrap gives the panic value when it is an error")
		assert.Equal(t, boom, pe.Value)
		assert.Contains(t, string(pe.Stack), "misuse_test.go", "the stack is the panicking goroutine's")
		assert.Contains(t, err.Error(), "leader task panicked: boom")

		cause := context.Cause(term.Context())
		require.ErrorAs(t, cause, &pe, "the term ends with the panic as its cause")
		assert.False(t, term.Valid())

		st, err := azlease.Inspect(context.Background(), e.client("x"), "leader")
		require.NoError(t, err)
		assert.False(t, st.Leased, "released after the task stopped")
		assert.True(t, st.Released)

		out := log.String()
		assert.Contains(t, out, "level=ERROR")
		assert.Contains(t, out, "leader task panicked")
		assert.Contains(t, out, "misuse_test.go", "the stack is logged")
	})
}

// TestElectorContendsAgainAfterTaskPanic: with ReleaseAndContend a task that
// panicked (with a value that is not an error) is run again in a new term.
func TestElectorContendsAgainAfterTaskPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		el, err := azlease.NewElector(e.client("a"), "leader", nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		var runs atomic.Int32
		var epochs []uint64
		err = el.Run(ctx, func(ctx context.Context, term *azlease.Term) error {
			epochs = append(epochs, term.Epoch())
			if runs.Add(1) == 1 {
				panic("first term fails")
			}
			cancel()
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, int32(2), runs.Load())
		assert.Equal(t, []uint64{epoch1, epoch1 + 1}, epochs)
	})
}

// TestElectorTaskGoexit: a task that ends its goroutine with
// runtime.Goexit is treated as returning an error; the Elector neither
// hangs nor crashes.
func TestElectorTaskGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{AfterTask: azlease.StopElecting})
		require.NoError(t, err)
		err = el.Run(context.Background(), func(context.Context, *azlease.Term) error {
			runtime.Goexit()
			return nil
		})
		require.ErrorContains(t, err, "Goexit")
		st, err := azlease.Inspect(context.Background(), e.client("x"), "leader")
		require.NoError(t, err)
		assert.False(t, st.Leased)
	})
}

// TestElectorStopOnTheTaskGoroutine: Stop called on the leader task's own
// goroutine, with a context unrelated to the task's, returns nil at once
// instead of waiting for the task (itself) until its ctx ends; the Elector
// then stops on its own and releases the lease.
func TestElectorStopOnTheTaskGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		el, err := azlease.NewElector(e.client("a"), "leader", nil)
		require.NoError(t, err)
		stopErr := make(chan error, 1)
		var waited time.Duration
		err = el.Run(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			stopErr <- el.Stop(sctx)
			waited = time.Since(start)
			<-ctx.Done() // the Elector goes on stopping: the term ends
			assert.ErrorIs(t, context.Cause(ctx), azlease.ErrStopped)
			return nil
		})
		require.NoError(t, err)
		require.NoError(t, <-stopErr)
		assert.Zero(t, waited, "Stop returned at once")
		<-el.Done()
		st, err := azlease.Inspect(context.Background(), e.client("x"), "leader")
		require.NoError(t, err)
		assert.False(t, st.Leased, "released once the task returned")
		assert.True(t, st.Released)
	})
}

// TestElectorStopWithTheTaskContext: Stop called from another goroutine with
// a context derived from the task's (here one that no longer cancels, so
// only the context's values connect it) returns nil at once; so does Stop
// of an outer Elector called from the task of an Elector that the outer
// one's task runs. Stop of another Elector still waits for it.
func TestElectorStopWithTheTaskContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		outer, err := azlease.NewElector(e.client("a"), "outer", nil)
		require.NoError(t, err)
		inner, err := azlease.NewElector(e.client("a"), "inner", &azlease.ElectorOptions{AfterTask: azlease.StopElecting})
		require.NoError(t, err)
		other, err := azlease.NewElector(e.client("b"), "other", nil)
		require.NoError(t, err)
		otherStopped := make(chan struct{})
		require.NoError(t, other.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			<-ctx.Done()
			time.Sleep(5 * time.Second) // a slow drain that Stop must wait for
			close(otherStopped)
			return nil
		}))
		for deadline := time.Now().Add(time.Minute); !other.IsLeader(); time.Sleep(10 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "other never led") // its task must run before anyone stops it
		}

		results := make(chan error, 3)
		err = outer.Run(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			// Another Elector's Stop, called with this task's context,
			// waits for that Elector as usual.
			require.NoError(t, other.Stop(ctx))
			select {
			case <-otherStopped:
			default:
				t.Error("Stop of another Elector returned before it stopped")
			}

			// A helper goroutine with a derived context. The task waits
			// for it, so a Stop that waited for the task would never end.
			helper := make(chan error, 1)
			go func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				start := time.Now()
				err := inner.Run(sctx, func(ictx context.Context, _ *azlease.Term) error {
					// The outer Elector's Stop, from the inner task.
					results <- outer.Stop(ictx)
					return nil
				})
				if err == nil && time.Since(start) > 10*time.Second {
					err = errors.New("inner Run took too long")
				}
				results <- err
				results <- outer.Stop(sctx)
				helper <- nil
			}()
			<-helper
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		for range 3 {
			require.NoError(t, <-results)
		}
		for _, name := range []string{"outer", "inner", "other"} {
			st, err := azlease.Inspect(context.Background(), e.client("x"), name)
			require.NoError(t, err)
			assert.False(t, st.Leased, name)
		}
	})
}
