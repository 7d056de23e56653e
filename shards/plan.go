package shards

// The plan: where every shard should be, computed by every replica from the
// same facts (the live members and their weights, and who owns each shard),
// so that they agree without a coordinator. It is sticky: a shard stays
// with its owner unless the owner holds more than its share, and only the
// surplus moves, from the most to the least loaded. A pure function of its
// inputs: replicas that see the same listing compute the same plan.

import (
	"cmp"
	"slices"
)

// member is a live member of the group as the plan sees it.
type member struct {
	name   string
	weight int
}

// planInput is what a replica knows after a poll.
type planInput struct {
	members []member          // live members, any order
	shards  []string          // every shard, in the group's order
	owner   map[string]string // shard → its owner's name; absent or "" when free
}

// plan maps each shard to the member that should own it ("" when there are
// no members). Shares are floor or ceil of K·w/W; the extra seats go to the
// members that hold the most already (then by name), so that the fewest
// shards move; a member keeps its shards in the group's order up to its
// share, and the rest, with the free shards first, fill the members below
// their share, the least loaded first.
func plan(in planInput) map[string]string {
	out := make(map[string]string, len(in.shards))
	if len(in.members) == 0 {
		for _, s := range in.shards {
			out[s] = ""
		}
		return out
	}
	ms := slices.Clone(in.members)
	slices.SortFunc(ms, func(a, b member) int { return cmp.Compare(a.name, b.name) })
	live := make(map[string]bool, len(ms))
	for _, m := range ms {
		live[m.name] = true
	}
	// Who holds what now: only live members hold anything.
	held := map[string][]string{}
	var free []string
	for _, s := range in.shards {
		if o := in.owner[s]; live[o] {
			held[o] = append(held[o], s)
		} else {
			free = append(free, s)
		}
	}
	target := shares(ms, len(in.shards), held)
	// Keep up to the share; the rest goes to the pool, the most loaded
	// owners' surplus first.
	type surplus struct {
		from   string
		load   int
		shards []string
	}
	var over []surplus
	kept := map[string]int{}
	for _, m := range ms {
		h := held[m.name]
		k := min(len(h), target[m.name])
		for _, s := range h[:k] {
			out[s] = m.name
		}
		kept[m.name] = k
		if len(h) > k {
			over = append(over, surplus{from: m.name, load: len(h), shards: h[k:]})
		}
	}
	slices.SortStableFunc(over, func(a, b surplus) int { return cmp.Compare(b.load, a.load) })
	pool := free
	for _, o := range over {
		pool = append(pool, o.shards...)
	}
	// Fill those below their share, the least loaded first.
	recv := slices.Clone(ms)
	slices.SortStableFunc(recv, func(a, b member) int { return cmp.Compare(kept[a.name], kept[b.name]) })
	for _, m := range recv {
		for kept[m.name] < target[m.name] && len(pool) > 0 {
			out[pool[0]] = m.name
			pool = pool[1:]
			kept[m.name]++
		}
	}
	return out
}

// shares is each member's share of k shards: floor(k·w/W), plus one for
// as many members as the remainder leaves, among those whose exact share is
// not whole. The extra seats go first to members that already hold more
// than their floor (each saves a move, and after the moves they are the
// ones that hold more, so planning again gives the same seats), then to the
// largest fractional parts, then by name. ms is sorted by name.
func shares(ms []member, k int, held map[string][]string) map[string]int {
	total := 0
	for _, m := range ms {
		total += m.weight
	}
	target := make(map[string]int, len(ms))
	given := 0
	var fractional []member
	for _, m := range ms {
		target[m.name] = k * m.weight / total
		given += target[m.name]
		if k*m.weight%total != 0 {
			fractional = append(fractional, m)
		}
	}
	above := func(m member) int {
		if len(held[m.name]) > target[m.name] {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(fractional, func(a, b member) int {
		if c := cmp.Compare(above(b), above(a)); c != 0 {
			return c
		}
		return cmp.Compare(k*b.weight%total, k*a.weight%total)
	})
	for _, m := range fractional[:k-given] {
		target[m.name]++
	}
	return target
}

// assessment is how far a view is from its plan.
type assessment struct {
	misplaced int            // shards not owned by their planned owner (free ones included)
	moves     int            // of those, shards owned by another live member: handoffs to make
	target    map[string]int // each member's share
}

func assess(in planInput, p map[string]string) assessment {
	a := assessment{target: map[string]int{}}
	live := map[string]bool{}
	for _, m := range in.members {
		live[m.name] = true
	}
	for _, s := range in.shards {
		want, have := p[s], in.owner[s]
		a.target[want]++
		if want != have || !live[have] {
			a.misplaced++
			if live[have] {
				a.moves++
			}
		}
	}
	delete(a.target, "")
	return a
}
