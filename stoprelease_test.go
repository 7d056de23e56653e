package azlease_test

// Issue 24 item 9: an Elector that stops while storage is unreachable gives
// its release one AttemptTimeout in all (the clean-release marker
// included), not the rest of the lease's validity: whoever stops the
// process (Kubernetes, systemd, podman) allows it a grace period, and a
// lease not released expires by itself. A term that ends while the Elector
// goes on (its task returned with ReleaseAndContend) still retries its
// release until the validity deadline, so that a follower takes over
// sooner once storage answers again.

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

func TestElectorStopReleaseBoundedWhenStorageIsUnreachable(t *testing.T) {
	for _, action := range []azleasetest.Action{azleasetest.Drop, azleasetest.Hang} {
		for _, how := range []string{"Stop", "task returned (StopElecting)"} {
			t.Run(how+"/"+actionName(action), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					e := newEmu(t)
					var logs syncBuffer
					a, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{
						AfterTask: azlease.StopElecting,
						Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
					})
					require.NoError(t, err)
					finish := make(chan struct{})
					require.NoError(t, a.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
						select {
						case <-ctx.Done():
						case <-finish:
						}
						return nil
					}))
					time.Sleep(6 * time.Second) // leading; the renewal due at 5 s has landed
					require.True(t, a.IsLeader())

					// Storage becomes unreachable for a: every request dies
					// (refused, or no answer at all).
					var releases, marks atomic.Int32
					e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
						switch r.Op {
						case azleasetest.OpReleaseLease:
							releases.Add(1)
						case azleasetest.OpSetMetadata:
							if r.Blob == "leader" { // not its candidacy
								marks.Add(1)
							}
						}
						return azleasetest.Fault{Action: action}
					}))
					stop := time.Now()
					if how == "Stop" {
						require.NoError(t, a.Stop(context.Background()))
					} else {
						close(finish)
						<-a.Done()
					}
					took := time.Since(stop)
					attempt := 3 * time.Second // AttemptTimeout's default
					if how == "Stop" {
						// With planned succession, Stop first lists the
						// candidates, within a second.
						attempt += time.Second
					}
					assert.LessOrEqual(t, took, attempt, "one AttemptTimeout for the whole release, not the lease's remaining validity (about 13 s)")
					if action == azleasetest.Hang {
						assert.Equal(t, attempt, took, "a hung marker write and release end at the bound")
					}
					assert.LessOrEqual(t, marks.Load(), int32(1), "one clean-release marker write")
					assert.Contains(t, logs.String(), "release failed; the lease will expire")

					// The lease was not released: it frees itself when it
					// expires, as the warning says.
					e.SetFaults(nil)
					st, err := azlease.Inspect(context.Background(), e.client("x"), "leader")
					require.NoError(t, err)
					assert.True(t, st.Leased, "still leased until it expires")
					time.Sleep(15 * time.Second)
					st, err = azlease.Inspect(context.Background(), e.client("x"), "leader")
					require.NoError(t, err)
					assert.False(t, st.Leased, "expired")
					t.Logf("release requests: %d, marker writes: %d, stop took %v", releases.Load(), marks.Load(), took)
				})
			})
		}
	}
}

// TestElectorReleaseAndContendRetriesRelease: a term whose task returned
// while the Elector goes on contending is not stopping: its release keeps
// retrying through a 5 s outage and lands once storage answers, long
// before the lease would expire.
func TestElectorReleaseAndContendRetriesRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		a, err := azlease.NewElector(e.client("a"), "leader", nil)
		require.NoError(t, err)
		var runs atomic.Int32
		finish := make(chan struct{})
		require.NoError(t, a.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
			if runs.Add(1) > 1 {
				<-ctx.Done() // the next term: lead until stopped
				return nil
			}
			select {
			case <-ctx.Done():
			case <-finish:
			}
			return nil
		}))
		time.Sleep(6 * time.Second)
		require.True(t, a.IsLeader())
		e.SetFaults(faultsFor("a", func(azleasetest.Request) azleasetest.Fault {
			return azleasetest.Fault{Action: azleasetest.Drop}
		}))
		close(finish)
		time.Sleep(5 * time.Second)
		e.SetFaults(nil)
		time.Sleep(2500 * time.Millisecond) // the release's next retry (backoff at most 2 s)
		st, err := azlease.Inspect(context.Background(), e.client("x"), "leader")
		require.NoError(t, err)
		assert.False(t, st.Leased, "released once storage answered, within the term's validity")
		require.NoError(t, a.Stop(context.Background()))
	})
}

func actionName(a azleasetest.Action) string {
	switch a {
	case azleasetest.Drop:
		return "refused"
	case azleasetest.Hang:
		return "no answer"
	}
	return "other"
}

// TestElectorLogsItsRelease (issue 24 item 10): at Info, an Elector whose
// task returned nil logs the release of its lease, and no error attribute.
func TestElectorLogsItsRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		var logs syncBuffer
		a, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{
			AfterTask: azlease.StopElecting,
			Logger:    slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		})
		require.NoError(t, err)
		require.NoError(t, a.Run(context.Background(), func(context.Context, *azlease.Term) error {
			time.Sleep(time.Second)
			return nil
		}))
		out := logs.String()
		assert.Contains(t, out, `level=INFO msg="azlease: released"`)
		assert.Contains(t, out, `level=INFO msg="azlease: leader task returned; stopping"`)
		assert.NotContains(t, out, "error=", "a task that returned nil is no error")
	})
}
