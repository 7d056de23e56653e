package azlease_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// readOnly answers as Azure answers an identity whose role may read and
// list blobs but not lease or write them (Storage Blob Data Reader): 403
// AuthorizationPermissionMismatch for everything but reads.
func readOnly(r azleasetest.Request) azleasetest.Fault {
	switch r.Op {
	case azleasetest.OpGetProperties, azleasetest.OpGetBlob, azleasetest.OpGetMetadata,
		azleasetest.OpListBlobs, azleasetest.OpGetContainerProperties:
		return azleasetest.Fault{}
	}
	return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusForbidden, Code: string(bloberror.AuthorizationPermissionMismatch)}
}

// TestReadOnlyRoleFailsAtOnce is issue 24's item 6 for the root package:
// with reads allowed and leases and writes refused, every primitive returns
// an error wrapping ErrPermanent at once, logged at Error once (the Elector
// used to follow for ever: its reads succeeded, so its refused acquisitions
// were retried every poll, logged at Debug), and never waits for a poll.
func TestReadOnlyRoleFailsAtOnce(t *testing.T) {
	cases := []struct {
		name string
		run  func(ctx context.Context, e *emu, log *logBuffer) error
	}{
		{"elector", func(ctx context.Context, e *emu, log *logBuffer) error {
			el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{Logger: log.logger()})
			require.NoError(t, err)
			err = el.Run(ctx, nil)
			assert.Error(t, el.Check(), "Check says why it stopped")
			return err
		}},
		{"mutex", func(ctx context.Context, e *emu, log *logBuffer) error {
			m, err := azlease.NewMutex(e.client("a"), "m", &azlease.MutexOptions{Logger: log.logger()})
			require.NoError(t, err)
			_, err = m.Lock(ctx)
			return err
		}},
		{"semaphore of 3", func(ctx context.Context, e *emu, log *logBuffer) error {
			s, err := azlease.NewSemaphore(e.client("a"), "s", 3, &azlease.MutexOptions{Logger: log.logger()})
			require.NoError(t, err)
			_, err = s.Acquire(ctx)
			return err
		}},
		{"doonce", func(ctx context.Context, e *emu, log *logBuffer) error {
			_, err := azlease.DoOnce(ctx, e.client("a"), "k", &azlease.DoOnceOptions{Logger: log.logger()},
				func(context.Context, azlease.Token) error { return nil })
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				// The container and the lock blobs exist, as an operator
				// made them; only this identity's role is read-only.
				for _, name := range []string{"leader", "m", "s/slot-0", "s/slot-1", "s/slot-2", "once/k"} {
					l := newLease(t, e.client("setup"), name, nil)
					_, err := l.Acquire(context.Background())
					require.NoError(t, err)
					require.NoError(t, l.Release(context.Background()))
				}
				e.SetFaults(faultsFor("a", readOnly))
				log := &logBuffer{}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				start := time.Now()
				err := tc.run(ctx, e, log)
				require.ErrorIs(t, err, azlease.ErrPermanent)
				assert.ErrorContains(t, err, "AuthorizationPermissionMismatch")
				assert.Less(t, time.Since(start), 5*time.Second, "at once, not after polls or a timeout")
				assert.Equal(t, 1, log.count("level=ERROR", "storage refuses requests"), "logged at Error once:\n%s", log)
			})
		})
	}
}

// TestElectorLaterRefusalIsRetried: an Elector that has acquired before and
// is refused later (a role assignment removed while it runs) keeps trying,
// logging the refusal at Error once for as long as it lasts, and leads
// again once the role is back.
func TestElectorLaterRefusalIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		log := &logBuffer{}
		el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{Logger: log.logger()})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, el.Start(ctx, nil))
		time.Sleep(time.Second)
		require.True(t, el.IsLeader())
		e.SetFaults(faultsFor("a", readOnly))
		time.Sleep(2 * time.Minute) // the term ends at its deadline; acquisitions are refused
		require.False(t, el.IsLeader())
		require.NoError(t, el.Err(), "still running")
		e.SetFaults(nil)
		time.Sleep(10 * time.Second)
		require.True(t, el.IsLeader(), "leads again once the role is back")
		cancel()
		require.NoError(t, el.Stop(context.Background()))
		for _, op := range []string{"op=renew", "op=acquire"} {
			assert.LessOrEqual(t, log.count("level=ERROR", "storage refuses requests", op), 1, "%s logged once:\n%s", op, log)
		}
		assert.GreaterOrEqual(t, log.count("level=ERROR", "storage refuses requests"), 1, "%s", log)
	})
}
