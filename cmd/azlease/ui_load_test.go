package main

// The ui's shard grid by load (issue 33 item 9): each shard's load, each
// member's load against its capacity, the hot shard, and why a shard last
// moved.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

func TestUIGroupByLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.New(nil)
		defer srv.Close()
		cc := func(id string) *container.Client {
			c, err := srv.ContainerClient("locks", id)
			require.NoError(t, err)
			return c
		}
		load := map[string]float64{"0": 100, "1": 1, "2": 1, "3": 1}
		work := func(ctx context.Context, s *shards.Shard) error {
			for ctx.Err() == nil {
				s.SetLoad(load[s.Name])
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			return nil
		}
		var groups []*shards.Group
		for _, id := range []string{"a", "b"} {
			g, err := shards.New(cc(id), "g", shards.Numbered(4), &shards.Options{Identity: id})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), work))
			groups = append(groups, g)
			time.Sleep(20 * time.Second)
		}
		time.Sleep(time.Minute)
		listed, err := azlease.InspectPrefix(context.Background(), cc("observer"), "g/")
		require.NoError(t, err)
		it := groupItem("g", listed)
		g := it.Group
		require.NotNil(t, g)
		assert.True(t, g.ByLoad)
		assert.Equal(t, []string{"0"}, g.Hot)
		for _, s := range g.Shards {
			assert.True(t, s.Reported, s.Name)
			assert.InEpsilon(t, load[s.Name], s.Load, 0.02, s.Name)
		}
		total := 0.0
		for _, m := range g.Members {
			total += m.Load
		}
		assert.InEpsilon(t, 103, total, 0.02)
		why := ""
		for _, m := range g.Moves {
			if m.From != "" {
				why = m.Why
			}
		}
		assert.NotEmpty(t, why, "a move's reason: %+v", g.Moves)
		for _, s := range g.Shards {
			assert.NotEmpty(t, s.Moved, "every shard says why its owner has it: %s", s.Name) // "new shard" too
		}

		// A removed shard's cleared blob says so, in the grid and the moves.
		require.NoError(t, shards.RemoveShards(context.Background(), cc("observer"), "g", "3"))
		time.Sleep(10 * time.Second)
		listed, err = azlease.InspectPrefix(context.Background(), cc("observer"), "g/")
		require.NoError(t, err)
		g = groupItem("g", listed).Group
		require.NotNil(t, g)
		removed := ""
		for _, s := range g.Shards {
			if s.Name == "3" {
				removed = s.Moved
			}
		}
		assert.Equal(t, "removed", removed, "%+v", g.Shards)
		why = ""
		for _, m := range g.Moves {
			if m.Shard == "3" && why == "" {
				why = m.Why
			}
		}
		assert.Equal(t, "removed", why, "the removed shard's latest move: %+v", g.Moves)
		for _, grp := range groups {
			require.NoError(t, grp.Stop(context.Background()))
		}
	})
}
