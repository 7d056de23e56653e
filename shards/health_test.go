package shards_test

// What a replica says about its health and how it meets storage that
// fails: Check's bound, the poll's cadence while acquisitions fail, and a
// role that may list but not lease (issue 24 items 5, 6 and 7).

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// listTimes records when a client's List Blobs requests reach the server.
type listTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (l *listTimes) add() {
	l.mu.Lock()
	l.at = append(l.at, time.Now())
	l.mu.Unlock()
}

// maxGap is the longest time between two listings in [from, to], the ends
// included.
func (l *listTimes) maxGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, gap := from, time.Duration(0)
	for _, t := range l.at {
		if t.Before(from) || t.After(to) {
			continue
		}
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return max(gap, to.Sub(prev))
}

// TestPollKeepsItsCadenceWhileAcquisitionsFail (issue 24 item 5): a
// replica alone with 64 free shards whose acquisitions all fail with 503
// for a minute (each Hold retries for a lease duration, 16 at a time) keeps
// listing the group every poll, and Check stays healthy. The loop used to
// wait for each batch of 16 acquisitions: it stopped listing for a minute
// and Check failed. Once storage accepts the acquisitions, it takes every
// shard.
func TestPollKeepsItsCadenceWhileAcquisitionsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var lists listTimes
		var mu sync.Mutex
		failing := true
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Client != "a":
			case r.Op == azleasetest.OpListBlobs:
				lists.add()
			case failing && r.Op == azleasetest.OpAcquireLease && strings.Contains(r.Blob, "/shards/"):
				return azleasetest.Fault{Action: azleasetest.Fail, Status: 503}
			}
			return azleasetest.Fault{}
		})
		names := shards.Numbered(64)
		o := newOwners()
		g, err := shards.New(srv.Client("a"), "g", names, &shards.Options{Identity: "a", Logger: testLogger("a")})
		require.NoError(t, err)
		require.NoError(t, g.Start(context.Background(), o.work("a")))
		t.Cleanup(func() { _ = g.Stop(context.Background()) }) // also when the test fails: the bubble must end
		start := time.Now()
		for range 60 {
			time.Sleep(time.Second)
			require.NoError(t, g.Check(), "after %v", time.Since(start))
		}
		P := longestPoll(shards.DefaultPollInterval)
		// A listing takes no time here; the last poll may still be waiting
		// to begin.
		assert.LessOrEqual(t, lists.maxGap(start.Add(P), time.Now()), P, "the longest time without a listing while acquisitions failed")
		mu.Lock()
		failing = false
		mu.Unlock()
		time.Sleep(20 * time.Second)
		assert.Equal(t, map[string]int{"a": 64}, o.counts())
		require.NoError(t, g.Stop(context.Background()))
		o.check(t, srv, "g", names)
	})
}

// levelCounter counts the records a logger receives at Error, and keeps
// their messages.
type levelCounter struct {
	mu     sync.Mutex
	errors []string
	warns  int
}

func (c *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *levelCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.Level >= slog.LevelError:
		line := r.Message
		r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
		c.errors = append(c.errors, line)
	case r.Level >= slog.LevelWarn:
		c.warns++
	}
	return nil
}
func (c *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *levelCounter) WithGroup(string) slog.Handler      { return c }

// TestReadOnlyRoleStopsTheGroup (issue 24 item 6): with a role that may
// list and read blobs but not lease or write them (403
// AuthorizationPermissionMismatch, as Storage Blob Data Reader gets), Run
// returns at once with an error wrapping azlease.ErrPermanent that names
// the refusal, logged once at Error; Check fails; the work never runs. The
// replica used to list happily, never join, log nothing above Debug, and
// report itself healthy.
func TestReadOnlyRoleStopsTheGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			switch r.Op {
			case azleasetest.OpListBlobs, azleasetest.OpGetProperties, azleasetest.OpGetBlob, azleasetest.OpGetMetadata, azleasetest.OpGetContainerProperties:
				return azleasetest.Fault{}
			}
			return azleasetest.Fault{Action: azleasetest.Fail, Status: 403, Code: string(bloberror.AuthorizationPermissionMismatch)}
		})
		logs := &levelCounter{}
		g, err := shards.New(srv.Client("a"), "g", shards.Numbered(4), &shards.Options{Identity: "a", Logger: slog.New(logs)})
		require.NoError(t, err)
		ran := false
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // bounds the test if Run does not return
		defer cancel()
		err = g.Run(ctx, func(ctx context.Context, s *shards.Shard) error {
			ran = true
			<-ctx.Done()
			return nil
		})
		took := time.Since(start)
		require.Error(t, err)
		assert.True(t, errors.Is(err, azlease.ErrPermanent), "%v", err)
		assert.True(t, bloberror.HasCode(err, bloberror.AuthorizationPermissionMismatch), "%v", err)
		assert.Contains(t, err.Error(), "membership")
		assert.Less(t, took, time.Second, "at once")
		assert.False(t, ran)
		assert.Error(t, g.Check())
		assert.ErrorIs(t, g.Err(), azlease.ErrPermanent)
		logs.mu.Lock()
		defer logs.mu.Unlock()
		require.Len(t, logs.errors, 1, "%q", logs.errors)
		assert.Contains(t, logs.errors[0], "AuthorizationPermissionMismatch")
	})
}

// TestRefusedListingStopsTheGroup: storage that refuses the replica's
// first listing for good (a wrong key: 403 AuthenticationFailed) stops the
// group at once, Run returning the refusal, logged once at Error (not once
// by the listing's episode and again as the group stops).
func TestRefusedListingStopsTheGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			return azleasetest.Fault{Action: azleasetest.Fail, Status: 403, Code: string(bloberror.AuthenticationFailed)}
		})
		logs := &levelCounter{}
		g, err := shards.New(srv.Client("a"), "g", shards.Numbered(4), &shards.Options{Identity: "a", Logger: slog.New(logs)})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		err = g.Run(ctx, func(ctx context.Context, s *shards.Shard) error { <-ctx.Done(); return nil })
		assert.Less(t, time.Since(start), time.Second, "at once")
		assert.ErrorIs(t, err, azlease.ErrPermanent)
		assert.True(t, bloberror.HasCode(err, bloberror.AuthenticationFailed), "%v", err)
		logs.mu.Lock()
		defer logs.mu.Unlock()
		assert.Len(t, logs.errors, 1, "%q", logs.errors)
	})
}

// TestShardRefusalsAreLoggedOncePerEpisode: storage that leases a
// replica's membership but refuses its shards for good (403 on their
// blobs only) leaves the replica running (one shard's trouble is not the
// replica's), logs the refusals once at Error for the whole episode, and
// its end at Info when an acquisition succeeds again.
func TestShardRefusalsAreLoggedOncePerEpisode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var mu sync.Mutex
		refuse := true
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			mu.Lock()
			defer mu.Unlock()
			if refuse && strings.Contains(r.Blob, "/shards/") && r.Op != azleasetest.OpListBlobs {
				return azleasetest.Fault{Action: azleasetest.Fail, Status: 403, Code: string(bloberror.AuthorizationPermissionMismatch)}
			}
			return azleasetest.Fault{}
		})
		logs := &levelCounter{}
		o := newOwners()
		g, err := shards.New(srv.Client("a"), "g", shards.Numbered(4), &shards.Options{Identity: "a", Logger: slog.New(logs)})
		require.NoError(t, err)
		require.NoError(t, g.Start(context.Background(), o.work("a")))
		t.Cleanup(func() { _ = g.Stop(context.Background()) })
		time.Sleep(30 * time.Second)
		require.NoError(t, g.Check())
		logs.mu.Lock()
		assert.Len(t, logs.errors, 1, "%q", logs.errors)
		logs.mu.Unlock()
		mu.Lock()
		refuse = false
		mu.Unlock()
		time.Sleep(10 * time.Second)
		assert.Equal(t, map[string]int{"a": 4}, o.counts())
		require.NoError(t, g.Stop(context.Background()))
		logs.mu.Lock()
		assert.Len(t, logs.errors, 1, "%q", logs.errors)
		logs.mu.Unlock()
	})
}

// TestCheckAfterOneLeaseDurationWithoutListing (issue 24 item 7): Check
// passes while a replica starts, for a lease duration and a listing
// interval (15 s and 2 s here), even if no listing has succeeded yet, then
// fails saying since when; after listings succeeded, it fails that long
// after the last one, as its documentation says (the code waited two
// lease durations), naming the last error. It used to fail at once before
// the first listing, reading "no successful listing for 2562047h47m16s".
func TestCheckAfterOneLeaseDurationWithoutListing(t *testing.T) {
	t.Run("before the first listing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := azleasetest.NewServer(t, nil)
			srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
				if r.Op == azleasetest.OpListBlobs {
					return azleasetest.Fault{Action: azleasetest.Fail, Status: 503}
				}
				return azleasetest.Fault{}
			})
			g, err := shards.New(srv.Client("a"), "g", shards.Numbered(4), &shards.Options{Identity: "a",
				LeaseDuration: 15 * time.Second, ListInterval: 2 * time.Second})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), newOwners().work("a")))
			t.Cleanup(func() { _ = g.Stop(context.Background()) })
			start := time.Now()
			assert.NoError(t, g.Check(), "starting")
			time.Sleep(16 * time.Second)
			assert.NoError(t, g.Check(), "within a lease duration and a listing interval of the start")
			time.Sleep(time.Until(start.Add(17*time.Second + time.Millisecond)))
			err = g.Check()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "no listing of the group has succeeded since the replica started 17.001s ago")
			assert.Contains(t, err.Error(), "ServerBusy")
			assert.NotContains(t, err.Error(), "2562047h")
			require.NoError(t, g.Stop(context.Background()))
		})
	})
	t.Run("after listings succeeded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := azleasetest.NewServer(t, nil)
			var mu sync.Mutex
			var last time.Time
			failing := false
			srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
				mu.Lock()
				defer mu.Unlock()
				if r.Op != azleasetest.OpListBlobs {
					return azleasetest.Fault{}
				}
				if failing {
					return azleasetest.Fault{Action: azleasetest.Fail, Status: 503}
				}
				last = time.Now()
				return azleasetest.Fault{}
			})
			g, err := shards.New(srv.Client("a"), "g", shards.Numbered(4), &shards.Options{Identity: "a",
				LeaseDuration: 15 * time.Second, ListInterval: 2 * time.Second})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), newOwners().work("a")))
			t.Cleanup(func() { _ = g.Stop(context.Background()) })
			time.Sleep(10 * time.Second)
			require.NoError(t, g.Check())
			mu.Lock()
			failing = true
			lastOK := last
			mu.Unlock()
			time.Sleep(time.Until(lastOK.Add(17 * time.Second)))
			assert.NoError(t, g.Check(), "a lease duration and a listing interval after the last listing")
			time.Sleep(time.Millisecond)
			err = g.Check()
			require.Error(t, err, "just over a lease duration and a listing interval after the last listing")
			assert.Contains(t, err.Error(), "no successful listing of the group for 17.001s; last error:")
			assert.Contains(t, err.Error(), "ServerBusy")
			require.NoError(t, g.Stop(context.Background()))
		})
	})
}
