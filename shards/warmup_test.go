package shards_test

// The warm-up before a hand-off (issue 33 item 7): the receiver's WarmUp
// runs while the owner still serves, the owner hands on only after it, and
// the serving gap is the drain and a round trip, not a poll.

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// TestWarmUpBeforeTheHandOff: a owns both shards; b joins with a warm-up
// of 5 s. The shard handed to b is still served by a until b's warm-up
// returned; b serves it within 300 ms of a's work returning (the work
// returns at once); nothing is owned twice.
func TestWarmUpBeforeTheHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(2)
		o := newOwners()
		st := newStarted()
		a, err := shards.New(srv.Client("a"), "g", names, &shards.Options{Identity: "a"})
		require.NoError(t, err)
		require.NoError(t, a.Start(context.Background(), st.wrap("a", o.work("a"))))
		time.Sleep(10 * time.Second)
		require.Equal(t, map[string]int{"a": 2}, o.counts())

		var mu sync.Mutex
		var warmed time.Time
		warmedShard := ""
		b, err := shards.New(srv.Client("b"), "g", names, &shards.Options{Identity: "b", WarmUp: func(ctx context.Context, s string) error {
			time.Sleep(5 * time.Second)
			mu.Lock()
			warmed, warmedShard = time.Now(), s
			mu.Unlock()
			return nil
		}})
		require.NoError(t, err)
		bStarted := map[string]time.Time{}
		require.NoError(t, b.Start(context.Background(), func(ctx context.Context, s *shards.Shard) error {
			mu.Lock()
			bStarted[s.Name] = time.Now()
			mu.Unlock()
			return o.work("b")(ctx, s)
		}))
		time.Sleep(30 * time.Second)
		require.Equal(t, map[string]int{"a": 1, "b": 1}, o.counts())
		mu.Lock()
		s := warmedShard
		require.NotEmpty(t, s, "b warmed the shard up")
		st.mu.Lock()
		aEnded := st.at[s]
		st.mu.Unlock()
		assert.False(t, aEnded.Before(warmed), "a served %s until b's warm-up returned (a stopped %v, warm-up returned %v)", s, aEnded, warmed)
		gap := bStarted[s].Sub(aEnded)
		mu.Unlock()
		t.Logf("serving gap %v", gap)
		assert.LessOrEqual(t, gap, 300*time.Millisecond, "the drain (none) and a round trip, not a poll")
		require.NoError(t, b.Stop(context.Background()))
		require.NoError(t, a.Stop(context.Background()))
		o.check(t, srv, "g", names)
	})
}
