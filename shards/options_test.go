package shards_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// TestOptionsAreValidated: New refuses what is out of bounds, naming the
// field, and corrects nothing.
func TestOptionsAreValidated(t *testing.T) {
	srv := azleasetest.New(nil)
	defer srv.Close()
	cc := srv.Client("x")
	for _, tc := range []struct {
		field string
		opts  shards.Options
	}{
		{"Options.Weight", shards.Options{Weight: -1}},
		{"Options.Weight", shards.Options{Weight: shards.MaxWeight + 1}},
		{"Options.LeaseDuration", shards.Options{LeaseDuration: 10 * time.Second}},
		{"Options.PollInterval", shards.Options{PollInterval: time.Millisecond}},
		{"Options.Jitter", shards.Options{Jitter: 0.6}},
		{"Options.Settle", shards.Options{Settle: 2 * time.Hour}},
		{"Options.DrainTimeout", shards.Options{DrainTimeout: -time.Second}},
		{"Options.MaxMovesPerPoll", shards.Options{MaxMovesPerPoll: -1}},
		{"Options.Identity", shards.Options{Identity: "a/b"}},
		{"Options.ListInterval", shards.Options{ListInterval: time.Second}},
		{"Options.ListInterval", shards.Options{ListInterval: 2 * time.Hour}},
		{"Options.Zone", shards.Options{Zone: "eu west"}},
		{"Options.Zone", shards.Options{Zone: strings.Repeat("z", shards.MaxZone+1)}},
	} {
		_, err := shards.New(cc, "g", shards.Numbered(4), &tc.opts)
		var oe *azlease.OptionError
		require.ErrorAs(t, err, &oe, tc.field)
		assert.Equal(t, tc.field, oe.Field)
	}
	for _, bad := range [][]string{{"a", "a"}, {"a/b"}, {""}, shards.Numbered(shards.MaxShards + 1)} {
		_, err := shards.New(cc, "g", bad, nil)
		require.ErrorIs(t, err, azlease.ErrInvalidOptions, "%q", bad)
	}
	g, err := shards.New(cc, "g", nil, nil)
	require.NoError(t, err, "no static list: the shards added at run time")
	assert.Empty(t, g.Shards())
	_, err = shards.New(cc, "", shards.Numbered(2), nil)
	require.ErrorIs(t, err, azlease.ErrInvalidOptions)
	_, err = shards.New(nil, "g", shards.Numbered(2), nil)
	require.ErrorIs(t, err, azlease.ErrInvalidOptions)
}

// TestMaxMovesPerPoll: an owner with MaxMovesPerPoll 1 hands its surplus on
// one shard per poll.
func TestMaxMovesPerPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(8)
		o := newOwners()
		opts := shards.Options{Identity: "a", MaxMovesPerPoll: 1, Jitter: -1}
		a, err := shards.New(srv.Client("a"), "g", names, &opts)
		require.NoError(t, err)
		require.NoError(t, a.Start(context.Background(), o.work("a")))
		time.Sleep(10 * time.Second)
		require.Equal(t, 8, o.counts()["a"])
		// Without jitter every poll falls on a whole multiple of the
		// interval from its replica's start: start b half an interval off
		// a, and sample b a quarter interval after its polls, so that no
		// two of these happen at one instant (their order would be the
		// scheduler's, and a window could count two of a's hand-offs or
		// none).
		time.Sleep(shards.DefaultPollInterval / 2)
		b, err := shards.New(srv.Client("b"), "g", names, &shards.Options{Identity: "b", Jitter: -1})
		require.NoError(t, err)
		require.NoError(t, b.Start(context.Background(), o.work("b")))
		time.Sleep(shards.DefaultPollInterval / 4)
		var seen []int
		for range 6 {
			time.Sleep(shards.DefaultPollInterval)
			seen = append(seen, o.counts()["b"])
		}
		assert.Equal(t, 4, seen[len(seen)-1], "balanced in the end: %v", seen)
		for i := 1; i < len(seen); i++ {
			assert.LessOrEqual(t, seen[i]-seen[i-1], 1, "at most one shard per poll: %v", seen)
		}
		require.NoError(t, a.Stop(context.Background()))
		require.NoError(t, b.Stop(context.Background()))
		o.check(t, srv, "g", names)
	})
}
