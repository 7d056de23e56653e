package shards_test

// Inspect as an operator meets it (issue 24 item 8): what the replicas will
// do, or plainly what the listing cannot tell.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

func shardNames(a shards.Assignment) []string {
	var out []string
	for _, s := range a.Shards {
		out = append(out, s.Name)
	}
	return out
}

// TestInspectShowsWhatTheReplicasPlan: without a shard list, Inspect plans
// with the list the members publish (12 numbered shards here), in their
// order (0, 1, 2 … 11, as the replicas plan, not 0, 1, 10, 11, 2 …), every
// shard included, those no replica has taken yet too; its plan is the
// replicas' (every shard planned where it is, once balanced). A list given
// that disagrees (8 shards for 12) is reported, and the members' used. It
// used to plan the shards that existed, in byte order: its planned column
// disagreed with the replicas, a never-taken shard was invisible, and a
// wrong count said "balanced".
func TestInspectShowsWhatTheReplicasPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		obs := srv.Client("observer")
		names := shards.Numbered(12)
		o := newOwners()
		// a settles for an hour: it takes nothing yet, and no shard
		// exists.
		a, err := shards.New(srv.Client("a"), "g", names, &shards.Options{Identity: "a", Settle: time.Hour})
		require.NoError(t, err)
		require.NoError(t, a.Start(context.Background(), o.work("a")))
		t.Cleanup(func() { _ = a.Stop(context.Background()) })
		time.Sleep(3 * time.Second)
		got, err := shards.Inspect(context.Background(), obs, "g", nil)
		require.NoError(t, err)
		assert.True(t, got.PlanKnown, got.Note)
		assert.Equal(t, 12, got.Count)
		assert.Equal(t, names, shardNames(got), "every shard, in the replicas' order")
		for _, s := range got.Shards {
			assert.Empty(t, s.State, "never taken: %+v", s)
			assert.Equal(t, "a", s.Planned)
		}
		assert.Equal(t, 12, got.Misplaced)
		require.NoError(t, a.Stop(context.Background()))

		for _, id := range []string{"b", "c", "d"} {
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), o.work(id)))
			t.Cleanup(func() { _ = g.Stop(context.Background()) })
			time.Sleep(10 * time.Second)
		}
		got, err = shards.Inspect(context.Background(), obs, "g", nil)
		require.NoError(t, err)
		require.True(t, got.Balanced(), "%+v", got)
		assert.Empty(t, got.Note)
		assert.Equal(t, names, shardNames(got))
		for _, s := range got.Shards {
			assert.Equal(t, s.Owner, s.Planned, "the plan is the replicas': %+v", s)
		}
		for _, m := range got.Members {
			assert.Equal(t, 4, m.Share, "%+v", m)
			assert.Equal(t, 4, m.Owns, "%+v", m)
			assert.Equal(t, 12, m.Count, "%+v", m)
		}

		wrong, err := shards.Inspect(context.Background(), obs, "g", shards.Numbered(8))
		require.NoError(t, err)
		assert.True(t, wrong.PlanKnown)
		assert.Equal(t, "the live members run 12 shards (0 to 11), not the 8 given: planned with theirs", wrong.Note)
		assert.Equal(t, names, shardNames(wrong))
		assert.True(t, wrong.Balanced())
	})
}

// TestInspectSaysWhatItCannotKnow: a group whose members run names other
// than 0 to K-1 is planned only with its list; members that do not
// publish their list (an older version, here a membership held by hand)
// leave the plan unknown without one; a group with no live member has no
// known list. Each time Note says so, and nothing is planned.
func TestInspectSaysWhatItCannotKnow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		obs := srv.Client("observer")
		names := []string{"x", "y", "z"}
		o := newOwners()
		g, err := shards.New(srv.Client("a"), "g", names, &shards.Options{Identity: "a"})
		require.NoError(t, err)
		require.NoError(t, g.Start(context.Background(), o.work("a")))
		time.Sleep(5 * time.Second)

		got, err := shards.Inspect(context.Background(), obs, "g", nil)
		require.NoError(t, err)
		assert.False(t, got.PlanKnown)
		assert.False(t, got.Balanced())
		assert.Equal(t, "the live members run 3 shards not named 0 to 2: give their list to see the plan", got.Note)
		assert.Equal(t, names, shardNames(got), "the shards that exist")
		for _, s := range got.Shards {
			assert.Empty(t, s.Planned)
			assert.Equal(t, "a", s.Owner)
		}
		got, err = shards.Inspect(context.Background(), obs, "g", names)
		require.NoError(t, err)
		assert.True(t, got.Balanced(), "%+v", got)
		assert.Empty(t, got.Note)

		// A member of an older version: weight only.
		ml, err := azlease.NewLease(obs, "g/members/old", &azlease.LeaseOptions{Identity: "old"})
		require.NoError(t, err)
		lk, err := ml.Hold(context.Background())
		require.NoError(t, err)
		require.NoError(t, lk.SetMetadata(context.Background(), map[string]string{"shardweight": "1"}))
		require.NoError(t, g.Stop(context.Background()))
		got, err = shards.Inspect(context.Background(), obs, "g", nil)
		require.NoError(t, err)
		assert.False(t, got.PlanKnown)
		assert.Contains(t, got.Note, "do not say which shards they run")
		got, err = shards.Inspect(context.Background(), obs, "g", names)
		require.NoError(t, err)
		assert.True(t, got.PlanKnown)
		assert.Contains(t, got.Note, "planned with the list given, 3 shards")
		require.NoError(t, lk.Unlock(context.Background()))

		got, err = shards.Inspect(context.Background(), obs, "g", nil)
		require.NoError(t, err)
		assert.False(t, got.PlanKnown)
		assert.Equal(t, "no live member: the shard list is not known (only the shards some replica has taken are shown)", got.Note)
		assert.Equal(t, names, shardNames(got))
	})
}

// TestAssignmentOfAListing: from a listing of the whole container, two
// groups and a lock of their own, AssignmentOf answers what Inspect answers
// for each group; an empty group has nothing.
func TestAssignmentOfAListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		o := newOwners()
		var groups []*shards.Group
		for _, g := range []struct {
			name string
			n    int
			ids  []string
		}{{"orders", 6, []string{"a", "b"}}, {"orders/eu", 3, []string{"c"}}} {
			for _, id := range g.ids {
				grp, err := shards.New(srv.Client(id), g.name, shards.Numbered(g.n), &shards.Options{Identity: id})
				require.NoError(t, err)
				require.NoError(t, grp.Start(context.Background(), o.work(id)))
				groups = append(groups, grp)
			}
		}
		time.Sleep(10 * time.Second)
		obs := srv.Client("observer")
		listed, err := azlease.InspectPrefix(context.Background(), obs, "")
		require.NoError(t, err)
		for _, g := range []string{"orders", "orders/eu"} {
			want, err := shards.Inspect(context.Background(), obs, g, nil)
			require.NoError(t, err)
			got := shards.AssignmentOf(g, listed, nil)
			assert.Equal(t, want, got, g)
		}
		a := shards.AssignmentOf("orders", listed, nil)
		assert.Len(t, a.Shards, 6)
		assert.Len(t, a.Members, 2)
		assert.Zero(t, a.Misplaced)
		a4 := shards.AssignmentOf("orders/eu", listed, shards.Numbered(4))
		assert.Len(t, a4.Shards, 3, "a list that differs from the members' is reported; theirs is used")
		assert.NotEmpty(t, a4.Note)
		assert.Equal(t, shards.Assignment{}, shards.AssignmentOf("", listed, nil))
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
	})
}
