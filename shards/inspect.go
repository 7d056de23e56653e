package shards

// Reading a group's assignment from outside (an operator, 'azlease status
// --shards'): who is a member, who owns which shard since when, and where
// the plan puts each shard, from one listing.

import (
	"context"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
)

// Assignment is a group as one listing shows it.
type Assignment struct {
	// Members are the live replicas, by name.
	Members []MemberStatus
	// Shards are the group's shards that exist, by name; shards that no
	// replica has taken yet do not exist.
	Shards []ShardStatus
	// Misplaced counts the listed shards that are not where the plan puts
	// them (free ones included): 0 when the group is balanced.
	Misplaced int
}

// MemberStatus is a live replica.
type MemberStatus struct {
	Name   string
	Weight int
	// Joined is when it joined, by its own clock; for display.
	Joined time.Time
	// Owns counts the shards it owns; Share is how many the plan gives it.
	Owns, Share int
	// Suspect is true when a shard's lease expired under it without
	// being handed on: it may have crashed. It keeps its share until its
	// membership expires (within a lease duration of its last renewal).
	Suspect bool
}

// ShardStatus is one shard.
type ShardStatus struct {
	Name string
	// State is Azure's lease state of the shard's blob.
	State string
	// Owner is the replica that owns it ("" when free); Epoch and Since
	// are its term's fencing epoch and start (by the owner's clock).
	Owner string
	Epoch uint64
	Since time.Time
	// HandingTo is the replica it is being handed to, when a hand-off is
	// under way.
	HandingTo string
	// Planned is where the plan puts it.
	Planned string
}

// Inspect reads the assignment of the group named group in the container cc
// points at: one List Blobs request per 5,000 blobs. It needs only read
// access. shards, when not nil, is the group's shard list, for the plan (a
// shard not created yet is then listed as free); nil plans the shards that
// exist.
func Inspect(ctx context.Context, cc *container.Client, group string, shards []string) (Assignment, error) {
	if cc == nil {
		return Assignment{}, optionErr("container", "nil *container.Client")
	}
	if group == "" {
		return Assignment{}, optionErr("group", "empty")
	}
	listed, err := azlease.InspectPrefix(ctx, cc, leaseNames{group: group}.prefix())
	if err != nil {
		return Assignment{}, err
	}
	return AssignmentOf(group, listed, shards), nil
}

// AssignmentOf is what [Inspect] answers, from a listing the caller made:
// listed holds the statuses of the group's blobs as [azlease.InspectPrefix]
// reads them (a listing of the group's prefix, group + "/", or of any
// prefix of it, such as a whole container: blobs that are not the group's
// are ignored). It makes no request, so a page that shows many groups
// (azlease ui) reads them all with one listing. shards is as for Inspect.
// An empty group has nothing.
func AssignmentOf(group string, listed []azlease.Status, shards []string) Assignment {
	if group == "" {
		return Assignment{}
	}
	v := parseView(leaseNames{group: group}, listed)
	if shards == nil {
		for s := range v.shards {
			shards = append(shards, s)
		}
		slices.Sort(shards)
	}
	in := v.input(shards, "", 0)
	p := plan(in)
	a := assess(in, p)
	out := Assignment{Misplaced: a.misplaced}
	owns := map[string]int{}
	for _, s := range shards {
		info, ok := v.shards[s]
		if !ok {
			info = shardInfo{name: s}
		}
		st := ShardStatus{Name: s, State: info.state, Planned: p[s], HandingTo: info.pendingTo, Epoch: info.epoch, Since: info.since}
		if info.leased {
			st.Owner = info.holder
			owns[info.holder]++
		}
		out.Shards = append(out.Shards, st)
	}
	for _, m := range v.members {
		out.Members = append(out.Members, MemberStatus{
			Name: m.name, Weight: m.weight, Joined: m.joined, Owns: owns[m.name], Share: a.target[m.name], Suspect: v.suspects[m.name],
		})
	}
	slices.SortFunc(out.Members, func(a, b MemberStatus) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}
