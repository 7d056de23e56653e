package shards_test

// Shard sets that change while the replicas run (AddShards, RemoveShards)
// and replicas started with different static lists (a rolling deploy), in
// fake time on the emulator: a shard added is owned within a poll interval
// and a second, by the least loaded replica; a shard removed has its work
// stopped within a poll interval and the drain, its blob cleared once
// released, and is never taken again; added again, its epochs go on; a
// rolling deploy that changes the list moves no shard back and forth and
// never owns one twice.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// started records when each shard's work starts, where, and why each
// ends.
type started struct {
	mu    sync.Mutex
	first map[string]time.Time
	where map[string]string
	ended map[string]error
	at    map[string]time.Time
}

func newStarted() *started {
	return &started{first: map[string]time.Time{}, where: map[string]string{}, ended: map[string]error{}, at: map[string]time.Time{}}
}

func (st *started) wrap(replica string, inner shards.Work) shards.Work {
	return func(ctx context.Context, s *shards.Shard) error {
		st.mu.Lock()
		if _, ok := st.first[s.Name]; !ok {
			st.first[s.Name] = time.Now()
		}
		st.where[s.Name] = replica
		st.mu.Unlock()
		err := inner(ctx, s)
		st.mu.Lock()
		st.ended[s.Name] = context.Cause(ctx)
		st.at[s.Name] = time.Now()
		st.mu.Unlock()
		return err
	}
}

// TestAddedShardIsOwnedWithinAPoll: three replicas of 8 shards (3, 3, 2):
// a shard added is owned within P + 1 s (P the longest jittered poll
// interval) by the replica with the fewest shards, and the group is
// balanced; no shard is owned twice.
func TestAddedShardIsOwnedWithinAPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(8)
		o := newOwners()
		st := newStarted()
		var groups []*shards.Group
		for _, id := range []string{"a", "b", "c"} {
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), st.wrap(id, o.work(id))))
			groups = append(groups, g)
		}
		time.Sleep(30 * time.Second)
		counts := o.counts()
		least := ""
		for _, id := range []string{"a", "b", "c"} {
			if least == "" || counts[id] < counts[least] {
				least = id
			}
		}
		require.Equal(t, 2, counts[least], "%v", counts)
		obs := srv.Client("observer")
		added := time.Now()
		require.NoError(t, shards.AddShards(context.Background(), obs, "g", "tenant-new"))
		for {
			st.mu.Lock()
			_, ok := st.first["tenant-new"]
			st.mu.Unlock()
			if ok || time.Since(added) > time.Minute {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		st.mu.Lock()
		took, where := st.first["tenant-new"].Sub(added), st.where["tenant-new"]
		st.mu.Unlock()
		P := longestPoll(shards.DefaultPollInterval)
		t.Logf("added shard owned after %v by %s", took, where)
		assert.LessOrEqual(t, took, P+time.Second)
		assert.Equal(t, least, where, "the replica with the fewest shards")
		time.Sleep(P) // every replica has listed since
		for _, g := range groups {
			assert.Contains(t, g.Shards(), "tenant-new")
		}
		time.Sleep(30 * time.Second)
		assert.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3}, o.counts())
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", append(names, "tenant-new"))
	})
}

// TestRemovedShardStopsAndIsCleared: a shard removed has its work's
// context ended (cause ErrStopped) within P + the drain, its blob is
// cleared (empty content) once released, and nobody takes it again; added
// again, it is owned with a larger epoch than before.
func TestRemovedShardStopsAndIsCleared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(6)
		o := newOwners()
		st := newStarted()
		obs := srv.Client("observer")
		const drain = 2 * time.Second
		work := func(id string) shards.Work {
			inner := o.work(id)
			return func(ctx context.Context, s *shards.Shard) error {
				require.NoError(t, s.Term.Write(ctx, []byte("checkpoint")))
				err := inner(ctx, s)
				time.Sleep(drain)
				return err
			}
		}
		var groups []*shards.Group
		for _, id := range []string{"a", "b"} {
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), st.wrap(id, work(id))))
			groups = append(groups, g)
		}
		time.Sleep(30 * time.Second)
		before, err := azlease.Inspect(context.Background(), obs, "g/shards/3")
		require.NoError(t, err)
		require.True(t, before.Leased)

		removed := time.Now()
		require.NoError(t, shards.RemoveShards(context.Background(), obs, "g", "3"))
		time.Sleep(10 * time.Second)
		st.mu.Lock()
		cause, at := st.ended["3"], st.at["3"]
		st.mu.Unlock()
		require.Error(t, cause)
		assert.True(t, errors.Is(cause, azlease.ErrStopped), "%v", cause)
		P := longestPoll(shards.DefaultPollInterval)
		t.Logf("removed shard's work returned %v after the removal", at.Sub(removed))
		assert.LessOrEqual(t, at.Sub(removed), P+drain+time.Second)
		after, err := azlease.Inspect(context.Background(), obs, "g/shards/3")
		require.NoError(t, err)
		assert.False(t, after.Leased, "released")
		assert.Equal(t, "1", after.Metadata["shardgone"])
		resp, err := obs.NewBlobClient("g/shards/3").DownloadStream(context.Background(), nil)
		require.NoError(t, err)
		content, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Empty(t, content, "the checkpoint is cleared")
		for _, g := range groups {
			assert.NotContains(t, g.Shards(), "3")
		}
		time.Sleep(time.Minute)
		after2, err := azlease.Inspect(context.Background(), obs, "g/shards/3")
		require.NoError(t, err)
		assert.False(t, after2.Leased, "nobody took it again")
		total := 0
		for _, n := range o.counts() {
			total += n
		}
		assert.Equal(t, 5, total)

		require.NoError(t, shards.AddShards(context.Background(), obs, "g", "3"))
		time.Sleep(10 * time.Second)
		again, err := azlease.Inspect(context.Background(), obs, "g/shards/3")
		require.NoError(t, err)
		assert.True(t, again.Leased, "added again")
		assert.Greater(t, again.Epoch, before.Epoch, "its epochs go on")
		added, removedNames, err := shards.ReadShardSet(context.Background(), obs, "g")
		require.NoError(t, err)
		assert.Equal(t, []string{"3"}, added)
		assert.Empty(t, removedNames)
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", names)
	})
}

// TestRollingDeployChangesTheList: three replicas run shards 0–9; one by
// one each is replaced by a replica running 2–11 (the new one started
// before the old one stops). Shards 10 and 11 start with the first new
// replica and only there; shards 0 and 1 stay with old replicas and stop
// when the last old one leaves; no shard is owned twice, and none moves
// more than the replacements need (no back and forth).
func TestRollingDeployChangesTheList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		oldList, newList := shards.Numbered(10), shards.Numbered(12)[2:]
		o := newOwners()
		var mu sync.Mutex
		ranOn := map[string][]string{} // shard → the replicas its work ran on, in order
		work := func(id string) shards.Work {
			inner := o.work(id)
			return func(ctx context.Context, s *shards.Shard) error {
				mu.Lock()
				if l := ranOn[s.Name]; len(l) == 0 || l[len(l)-1] != id {
					ranOn[s.Name] = append(ranOn[s.Name], id)
				}
				mu.Unlock()
				return inner(ctx, s)
			}
		}
		var all []*shards.Group
		start := func(id string, list []string) *shards.Group {
			g, err := shards.New(srv.Client(id), "g", list, &shards.Options{Identity: id})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), work(id)))
			all = append(all, g)
			return g
		}
		olds := []*shards.Group{start("old0", oldList), start("old1", oldList), start("old2", oldList)}
		time.Sleep(30 * time.Second)
		require.Len(t, o.counts(), 3)
		for i, old := range olds {
			start(fmt.Sprintf("new%d", i), newList)
			time.Sleep(20 * time.Second)
			if i == 0 {
				mu.Lock()
				for _, s := range []string{"10", "11"} {
					assert.Equal(t, []string{"new0"}, ranOn[s], "shard %s starts with the first new replica", s)
				}
				mu.Unlock()
			}
			require.NoError(t, old.Stop(context.Background()))
			time.Sleep(20 * time.Second)
			mu.Lock()
			for _, s := range []string{"0", "1"} {
				for _, r := range ranOn[s] {
					assert.Contains(t, r, "old", "shard %s only on old replicas", s)
				}
			}
			mu.Unlock()
		}
		time.Sleep(30 * time.Second)
		c := o.counts()
		total := 0
		for id, n := range c {
			assert.Contains(t, id, "new")
			total += n
		}
		assert.Equal(t, 10, total, "shards 2–11 run, 0 and 1 stopped: %v", c)
		o.mu.Lock()
		for _, s := range []string{"0", "1"} {
			_, running := o.now[s]
			assert.False(t, running, "shard %s stopped with the last old replica", s)
		}
		o.mu.Unlock()
		// No back and forth: a shard's work never returns to a replica it
		// left.
		mu.Lock()
		for s, l := range ranOn {
			seen := map[string]bool{}
			for _, r := range l {
				assert.False(t, seen[r], "shard %s went back to %s: %v", s, r, l)
				seen[r] = true
			}
		}
		mu.Unlock()
		for _, g := range all {
			_ = g.Stop(context.Background())
		}
		o.check(t, srv, "g", shards.Numbered(12))
	})
}
