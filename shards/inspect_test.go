package shards_test

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
		assert.Len(t, shards.AssignmentOf("orders/eu", listed, shards.Numbered(4)).Shards, 4, "a shard not created yet is listed")
		assert.Equal(t, shards.Assignment{}, shards.AssignmentOf("", listed, nil))
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
	})
}
