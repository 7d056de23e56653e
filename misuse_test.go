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
// MaxAttempts (fn ran 4 times with MaxAttempts 3). Now every DoOnce and
// InspectOnce on the key fails with a permanent error that says to run
// ResetOnce, fn never runs, and after ResetOnce MaxAttempts holds.
func TestDoOnceCorruptMarker(t *testing.T) {
	for _, bad := range []map[string]string{
		{"azleaseoncestate": "failed", "azleaseonceattempts": "-1"},
		{"azleaseoncestate": "pending", "azleaseonceattempts": "9223372036854775807"},
		{"azleaseoncestate": "failed", "azleaseonceattempts": "-9223372036854775808"},
		{"azleaseoncestate": "finished", "azleaseonceattempts": "1"},
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
					_, err = azlease.DoOnce(ctx, e.client("a"), "k", fn, opts)
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
					_, err = azlease.DoOnce(ctx, e.client("a"), "k", fn, opts)
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
		_, err = azlease.DoOnce(ctx, e.client("a"), "k", func(context.Context, azlease.Token) error {
			t.Error("fn ran a sixth attempt with MaxAttempts 3")
			return nil
		}, nil)
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
		assert.Equal(t, []uint64{1, 2}, epochs)
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
