package azlease_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

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
