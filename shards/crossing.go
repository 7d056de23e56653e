package shards

// The band's edge: a replica of a settled group that sees, with no
// request, that its own loads (changed by less than loadTotalStep, which
// would wait for loadRepublish) take the group out of the band lists and
// publishes them at once; and nearBand, the cheap filter that spares the
// decision at polls where no member is near the band's edge.

import "time"

// loadsCross reports whether this replica's smoothed loads, as it would
// publish them now, make its last listing's decision no longer calm
// (misplaced shards, or hand-ons this round) when that decision was calm
// and the group settled: the poll then lists, and that listing's
// keepMembership writes the loads at once and touches the registry, so
// that the group acts within a couple of polls rather than at the next
// listings (up to ListInterval + loadRepublish later). It makes no
// request: it decides on the last listing's view with this replica's own
// entry given the new loads, and only when nearBand says the decision may
// change. It sets g.crossing for that keepMembership. Only the run loop
// calls it.
func (g *Group) loadsCross() bool {
	if g.unsettled || !g.lastCalm || g.lastView.members == nil {
		return false // the group lists at every poll already, or nothing is known
	}
	g.mu.Lock()
	busy, m, published := g.memberOp, g.member, g.published
	g.mu.Unlock()
	if busy || m == nil || !m.Valid() || published == nil {
		return false // a write is under way or due anyway
	}
	now := time.Now()
	next := &announcement{}
	next.loads, next.rest = g.publishedLoads(now)
	if next.loads == published.loads && next.rest == published.rest {
		return false // nothing new to publish
	}
	self := g.cfg.identity
	w, ok := g.lastView.withLoads(self, next)
	if !ok || !w.nearBand(g.lastSet, self, g.cfg.weight, g.cfg.zone) {
		return false
	}
	d := w.decide(g.lastSet, self, g.cfg.weight, g.cfg.zone, now, g.cfg.cooldown)
	g.crossing = d.misplaced > 0 || len(d.round) > 0
	return g.crossing
}

// nearBand reports whether v's decision may not be calm. Guaranteed: when
// it is false, decide on v (the same arguments) finds no shard misplaced,
// plans no hand-on and leaves every shard with its owner. It is false only
// when the load balancer decides by load (some shard reports one, every
// member may own every shard, one zone) and its input is far from any
// move (see inputNearBand, whose test it makes here on the loads as
// decide reads them, in one pass over the shards and without the maps
// decide builds: a poll's check costs a fraction of a decision).
func (v view) nearBand(set shardSet, self string, weight int, zone string) bool {
	if set.eligible != nil {
		return true
	}
	type acc struct {
		known   float64 // the reported loads of its shards
		unknown int     // its shards that report none (the mean each)
		weight  int
	}
	members := make(map[string]*acc, len(v.members)+1)
	ref, seen := zone, self != "" // the zone every member must be in, as decide reads them
	for _, m := range v.members {
		z := m.zone
		if m.name == self {
			z = zone
		}
		if !seen {
			ref, seen = z, true
		}
		if z != ref {
			return true // zones: balanced by zone too
		}
		members[m.name] = &acc{weight: m.weight}
	}
	if _, listed := members[self]; self != "" && !listed {
		members[self] = &acc{weight: weight}
	}
	if len(members) == 0 {
		return true
	}
	sum, n, heaviest := 0.0, 0, 0.0
	for _, s := range set.names {
		a := members[v.shards[s].owner()]
		if a == nil {
			return true // free, or its owner not a member: it is placed
		}
		if l, ok := v.shardLoad(s); ok {
			a.known += l
			sum += l
			n++
			heaviest = max(heaviest, l)
		} else {
			a.unknown++
		}
	}
	if n == 0 || sum <= 0 {
		return true // by count: decide as the listing did
	}
	mean := sum / float64(n)
	if n < len(set.names) {
		heaviest = max(heaviest, mean)
	}
	total, capTotal, biggest := sum+float64(len(set.names)-n)*mean, 0, 0
	for _, a := range members {
		capTotal += a.weight
		biggest = max(biggest, a.weight)
	}
	level := total / float64(capTotal)
	if len(members) >= 2 && heaviest >= nearMargin*level*float64(biggest) {
		return true // a hot shard, or nearly
	}
	for _, a := range members {
		if (a.known+float64(a.unknown)*mean)/float64(a.weight) >= nearMargin*bandHigh*level {
			return true
		}
	}
	return false
}

// nearMargin is how close, as a share, a member's load per capacity may
// come to the band's edge (bandHigh × the level), or the heaviest shard
// to the hot threshold (a member's share at the level), before
// inputNearBand says near: room for the rounding of sums taken in
// another order than balance's.
const nearMargin = 0.99

// inputNearBand reports whether balance may plan a move from in.
// Guaranteed: when it is false, balance(in) plans no move and leaves every
// shard with its owner. It is true when any shard is free (or owned by no
// member of in), every member may not own every shard, the members are in
// more than one zone, the heaviest shard comes within nearMargin of the
// hot threshold, or a member's load per capacity within nearMargin of the
// band's edge: balance's only sources of moves.
func inputNearBand(in balanceInput) bool {
	if in.eligible != nil || len(in.members) == 0 {
		return true
	}
	capTotal, biggest := 0.0, 0.0
	load := make(map[string]float64, len(in.members))
	for _, m := range in.members {
		if m.zone != in.members[0].zone {
			return true
		}
		capTotal += m.capacity
		biggest = max(biggest, m.capacity)
		load[m.name] = 0
	}
	total, heaviest := 0.0, 0.0
	for _, s := range in.shards {
		if _, live := load[s.owner]; !live {
			return true // free: it is placed
		}
		load[s.owner] += s.load
		total += s.load
		heaviest = max(heaviest, s.load)
	}
	level := total / capTotal
	if len(in.members) >= 2 && heaviest >= nearMargin*level*biggest {
		return true // a hot shard, or nearly
	}
	for _, m := range in.members {
		if load[m.name]/m.capacity >= nearMargin*bandHigh*level {
			return true
		}
	}
	return false
}
