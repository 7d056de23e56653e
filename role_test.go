package azlease_test

// What a reader learns about a lock blob's kind without holding it: the role
// each kind of holder records with its epoch (Status.Role), and a DoOnce
// key's marker read from a listing (Status.OnceMarker), as azlease ui shows
// them.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestStatusRole: an Elector's blob reads "elector", a Mutex's and each
// Semaphore slot's "mutex", a DoOnce key's "once", a bare Lease's "lease", by
// Inspect and InspectPrefix alike; a blob azlease never leased reads "".
func TestStatusRole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("reader")

		el, err := azlease.NewElector(e.client("leader"), "sched", &azlease.ElectorOptions{Identity: "leader"})
		require.NoError(t, err)
		leading := make(chan struct{})
		require.NoError(t, el.Start(ctx, func(ctx context.Context, _ *azlease.Term) error {
			close(leading)
			<-ctx.Done()
			return nil
		}))
		<-leading
		defer func() { require.NoError(t, el.Stop(ctx)) }()

		m, err := azlease.NewMutex(e.client("m"), "jobs", &azlease.MutexOptions{Identity: "m"})
		require.NoError(t, err)
		lk, err := m.Lock(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, lk.Unlock(ctx)) }()

		sem, err := azlease.NewSemaphore(e.client("s"), "exports", 2, &azlease.MutexOptions{Identity: "s"})
		require.NoError(t, err)
		sl, err := sem.Acquire(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, sl.Unlock(ctx)) }()

		_, err = azlease.DoOnce(ctx, e.client("o"), "migrate", &azlease.DoOnceOptions{Identity: "o"},
			func(context.Context, azlease.Token) error { return nil })
		require.NoError(t, err)

		l := newLease(t, e.client("l"), "raw", &azlease.LeaseOptions{Identity: "l"})
		_, err = l.Acquire(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, l.Release(ctx)) }()
		putBlob(t, cc, "plain", map[string]*string{"note": to.Ptr("not a lock")})

		listed, err := azlease.InspectPrefix(ctx, cc, "")
		require.NoError(t, err)
		got := map[string]string{}
		slot := ""
		for _, st := range listed {
			got[st.Name] = st.Role
			if strings.HasPrefix(st.Name, "exports/slot-") {
				slot = st.Name // only the slot taken (any of the two) exists
			}
		}
		want := map[string]string{
			"sched": "elector", "jobs": "mutex", slot: "mutex", "once/migrate": "once", "raw": "lease", "plain": "",
			"sched/candidates/leader": "", // the Elector's candidacy: no lease, no record
			// The fair locks' tickets (made by each lock's first holder): no
			// lease, no record.
			"jobs/queue/tickets-00000000000000000000":    "",
			"exports/queue/tickets-00000000000000000000": "",
		}
		assert.Equal(t, want, got)
		for name, role := range want {
			st, err := azlease.Inspect(ctx, cc, name)
			require.NoError(t, err)
			assert.Equal(t, role, st.Role, name)
		}
	})
}

// TestOnceMarkerFromAListing: the marker a listing carries is the one
// InspectOnce reads, with Locked while a runner holds the key; a blob with
// no marker says so; a corrupt marker is reported as InspectOnce reports it.
func TestOnceMarkerFromAListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("reader")
		opts := &azlease.DoOnceOptions{Identity: "runner", MaxAttempts: 2}
		_, err := azlease.DoOnce(ctx, e.client("runner"), "seed", opts, func(context.Context, azlease.Token) error {
			return errors.New("table missing")
		})
		require.Error(t, err)
		running := make(chan struct{})
		finish := make(chan struct{})
		go func() {
			_, _ = azlease.DoOnce(ctx, e.client("runner"), "migrate", opts, func(context.Context, azlease.Token) error {
				close(running)
				<-finish
				return nil
			})
		}()
		<-running
		putBlob(t, cc, "once/broken", map[string]*string{"azleaseoncestate": to.Ptr("weird"), "azleaseonceattempts": to.Ptr("1")})
		putBlob(t, cc, "once/plain", nil)

		listed, err := azlease.InspectPrefix(ctx, cc, "once/")
		require.NoError(t, err)
		require.Len(t, listed, 4)
		byName := map[string]azlease.Status{}
		for _, st := range listed {
			byName[st.Name] = st
		}
		for _, key := range []string{"seed", "migrate"} {
			m, ok, err := byName["once/"+key].OnceMarker()
			require.NoError(t, err)
			assert.True(t, ok, key)
			want, err := azlease.InspectOnce(ctx, cc, key, nil)
			require.NoError(t, err)
			assert.Equal(t, want, m, key)
		}
		m, _, _ := byName["once/seed"].OnceMarker()
		assert.Equal(t, azlease.OnceFailed, m.State)
		assert.Equal(t, "table missing", m.LastError)
		m, _, _ = byName["once/migrate"].OnceMarker()
		assert.True(t, m.Locked)
		assert.Equal(t, azlease.OnceRunning, m.State)

		_, ok, err := byName["once/broken"].OnceMarker()
		assert.True(t, ok)
		assert.ErrorIs(t, err, azlease.ErrOnceCorrupt)
		m, ok, err = byName["once/plain"].OnceMarker()
		assert.False(t, ok)
		assert.NoError(t, err)
		assert.Equal(t, azlease.OncePending, m.State)
		m, ok, err = azlease.Status{}.OnceMarker()
		assert.False(t, ok)
		assert.NoError(t, err)
		assert.Equal(t, azlease.OncePending, m.State)

		close(finish)
		synctest.Wait()
		time.Sleep(time.Second) // the runner records done and releases
		synctest.Wait()
	})
}
