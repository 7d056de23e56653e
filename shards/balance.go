package shards

// The load balancer: where every shard should be when shards report loads,
// computed by every replica from the same listing, so that they agree
// without a coordinator; only a shard's owner acts on it. A pure function
// of its input (the listing and the time it is planned at): free shards go
// to the member with the least load per capacity, the heaviest first; a
// member above the band (load per capacity over bandHigh × the group's
// level) hands on the fewest shards that bring it to bandStop × the level
// when three or fewer do (four in a small group; fewest.go, a swap
// included: a member that takes a shard of such a plan hands on its own
// once that shard is under way), else the shards
// that best bring it back, one at a time, to members below the level,
// until it is at bandStop × the level; a shard
// whose load alone exceeds a member's share gets a member to itself; no
// shard that changed hands within the cooldown moves for load. The moves
// come in order: a round executes only the first ones, within the
// group-wide budget.

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// The band: a member moves shards away when its load per capacity is above
// bandHigh × the level (the group's load per capacity), down to bandStop ×
// the level; a shard goes only to a member below the level, and only where
// it lowers the larger of the two members' loads.
const (
	bandHigh = 1.10
	bandStop = 1.05
	// recvHigh is where the fewest-moves search leaves a receiver at
	// most.
	recvHigh = 1.10
	// bandEdge is where the search may leave the source when no plan of
	// at most fewestDepth moves reaches bandStop.
	bandEdge = 1.08
)

// DefaultCooldown is how long a shard handed on stays where it is before it
// may move again for load.
const DefaultCooldown = 60 * time.Second

// moveBudget is the hand-ons for load allowed per round: at most max(1, 2 % of the shards) hand-ons for
// load across the group at once.
func moveBudget(k int) int { return max(1, k/50) }

// bmember is a live member as the balancer sees it.
type bmember struct {
	name     string
	capacity float64 // Options.Weight
	zone     string
}

// bshard is a shard as the balancer sees it.
type bshard struct {
	name    string
	owner   string    // the live member that owns it (or receives it, while it is handed on); "" when free
	load    float64   // its smoothed load, or the mean when not known
	known   bool      // its load was reported
	pending bool      // being handed on: it is not moved again
	pinned  bool      // its work did not return in time when it was to be handed on: it stays
	since   time.Time // when its owner's term began by a hand-on, by the owner's clock (zero: not by a hand-on): the cooldown's start
}

// balanceInput is what a replica knows after a poll.
type balanceInput struct {
	members  []bmember
	shards   []bshard                        // in the group's order
	eligible func(shard, member string) bool // nil: every member may own every shard
	now      time.Time
	cooldown time.Duration
}

// move is one hand-on the balancer plans.
type move struct {
	shard, from, to string
	reason          string // load, hot, zone, join, list
}

// balancePlan is the balancer's answer.
type balancePlan struct {
	owner map[string]string  // shard → where it should be ("" when no member may own it)
	moves []move             // hand-ons, in the order the rounds make them
	level float64            // the load per capacity the members not given to a hot shard are balanced to
	hot   []string           // shards whose load alone exceeds a member's share, heaviest first
	load  map[string]float64 // member → its load once the plan is done
}

// balance plans the shards' placement by load. Ties are broken by names,
// so that the same input gives the same plan on every replica.
func balance(in balanceInput) balancePlan {
	p := balancePlan{owner: make(map[string]string, len(in.shards)), load: map[string]float64{}}
	if len(in.members) == 0 {
		for _, s := range in.shards {
			p.owner[s.name] = ""
		}
		return p
	}
	ms := slices.Clone(in.members)
	slices.SortFunc(ms, func(a, b bmember) int { return cmp.Compare(a.name, b.name) })
	byName := make(map[string]*bmember, len(ms))
	capTotal := 0.0
	for i := range ms {
		byName[ms[i].name] = &ms[i]
		capTotal += ms[i].capacity
	}
	ok := func(s, m string) bool { return in.eligible == nil || in.eligible(s, m) }
	held := map[string][]*bshard{} // member → its shards, in the group's order
	var free []*bshard
	total := 0.0
	shards := make([]bshard, len(in.shards))
	copy(shards, in.shards)
	for i := range shards {
		s := &shards[i]
		total += s.load
		if _, live := byName[s.owner]; live {
			held[s.owner] = append(held[s.owner], s)
			p.load[s.owner] += s.load
		} else {
			s.owner = ""
			free = append(free, s)
		}
	}
	empty := map[string]bool{} // members that held nothing before this plan
	for _, m := range ms {
		p.load[m.name] += 0 // every member has an entry
		empty[m.name] = len(held[m.name]) == 0
	}
	u := func(m string) float64 { return p.load[m] / byName[m].capacity }
	level := total / capTotal
	p.level = level

	// Hot shards: a shard heavier than a member's share at the level of the
	// others gets a member to itself, the heaviest first, at most one
	// fewer than the members. dedicated maps each such member to its shard.
	dedicated := map[string]*bshard{}
	var hot []*bshard
	for {
		var next *bshard
		for i := range shards {
			s := &shards[i]
			if slices.Contains(hot, s) {
				continue
			}
			if next == nil || s.load > next.load || s.load == next.load && s.name < next.name {
				next = s
			}
		}
		if next == nil || len(hot) >= len(ms)-1 {
			break
		}
		rest, restCap := total, capTotal
		for m, h := range sortedDedicated(dedicated) { // in one order on every replica: float sums
			rest -= h.load
			restCap -= byName[m].capacity
		}
		biggest := 0.0
		for _, m := range ms {
			if dedicated[m.name] == nil {
				biggest = max(biggest, m.capacity)
			}
		}
		if restCap <= 0 || next.load <= rest/restCap*biggest {
			break
		}
		// Its host: its owner, unless that member hosts a heavier hot
		// shard already; then the largest free member, the least loaded.
		host := next.owner
		if host == "" || dedicated[host] != nil || !ok(next.name, host) {
			host = ""
			for _, m := range ms {
				if dedicated[m.name] != nil || !ok(next.name, m.name) {
					continue
				}
				if host == "" || m.capacity > byName[host].capacity || m.capacity == byName[host].capacity && u(m.name) < u(host) {
					host = m.name
				}
			}
		}
		if host == "" {
			break
		}
		hot = append(hot, next)
		dedicated[host] = next
	}
	for _, h := range hot {
		p.hot = append(p.hot, h.name)
	}
	// The level of the members not given to a hot shard.
	rest, restCap := total, capTotal
	for m, h := range sortedDedicated(dedicated) {
		rest -= h.load
		restCap -= byName[m].capacity
	}
	if restCap > 0 {
		level = rest / restCap
	}
	p.level = level

	place := func(s *bshard, to string) {
		if s.owner != "" {
			p.load[s.owner] -= s.load
			i := slices.Index(held[s.owner], s)
			held[s.owner] = slices.Delete(held[s.owner], i, i+1)
		}
		s.owner = to
		p.load[to] += s.load
		held[to] = append(held[to], s)
	}

	// Free shards: hot ones to their hosts, then the heaviest first to the
	// member they leave the least loaded per capacity.
	slices.SortStableFunc(free, func(a, b *bshard) int {
		if c := cmp.Compare(b.load, a.load); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	for _, s := range free {
		to := ""
		for m, h := range dedicated {
			if h == s {
				to = m
			}
		}
		if to == "" {
			best := math.Inf(1)
			for _, m := range ms {
				if dedicated[m.name] != nil || !ok(s.name, m.name) {
					continue
				}
				if v := (p.load[m.name] + s.load) / m.capacity; v < best {
					best, to = v, m.name
				}
			}
		}
		if to == "" {
			for _, m := range ms { // only members given to hot shards may own it
				if ok(s.name, m.name) {
					to = m.name
					break
				}
			}
		}
		if to != "" {
			place(s, to)
		}
	}

	movable := func(s *bshard) bool {
		return !s.pending && !s.pinned && (s.since.IsZero() || in.now.Sub(s.since) >= in.cooldown)
	}
	add := func(s *bshard, to, reason string) {
		p.moves = append(p.moves, move{shard: s.name, from: s.owner, to: to, reason: reason})
		place(s, to)
	}

	// Shards on a member whose list does not have them (a rolling deploy
	// that changes the lists), and hot shards not on their host, go first.
	for _, m := range ms {
		for _, s := range slices.Clone(held[m.name]) {
			if !ok(s.name, m.name) && !s.pending && !s.pinned {
				if to := leastLoaded(ms, s, dedicated, ok, u, ""); to != "" {
					add(s, to, "list")
				}
			}
		}
	}
	for host, h := range sortedDedicated(dedicated) {
		if h.owner != host && !h.pending && movable(h) {
			add(h, host, "hot")
		}
	}
	// Hosts of hot shards hand on everything else, a shard within its
	// cooldown too: it cannot come back to a member given to a hot shard,
	// and waiting for its cooldown kept the host above its share for up to
	// a minute.
	for host := range sortedDedicated(dedicated) {
		for _, s := range slices.Clone(held[host]) {
			if s == dedicated[host] || s.pending || s.pinned {
				continue
			}
			if to := leastLoaded(ms, s, dedicated, ok, u, host); to != "" {
				add(s, to, "hot")
			}
		}
	}

	// The band: the most loaded member above bandHigh × level hands on the
	// shard that best lowers the larger of its load and the receiver's,
	// until it is at bandStop × level or no move helps.
	stuck := map[string]bool{}
	active := map[string]bool{}   // members that went above the band: they go on down to bandStop
	finished := map[string]bool{} // members that finish a swap within the band (fewestMoves)
	// makeRoom looks, for the stuck member src, for one of its shards s and
	// a receiver b below the level that s would take above the band, such
	// that b's own small shards can go to other members (src included: a
	// swap), each staying within the band, and bring b back within it: it
	// plans those moves, then s's, and reports whether it did.
	makeRoom := func(src string) bool {
		cs := byName[src].capacity
		for _, s := range slices.Backward(sortedByLoad(held[src])) {
			if !movable(s) {
				continue
			}
			for _, b := range ms {
				if b.name == src || dedicated[b.name] != nil || !ok(s.name, b.name) || u(b.name) >= level {
					continue
				}
				excess := u(b.name) + s.load/b.capacity - bandHigh*level
				if excess <= 0 || u(src)-s.load/cs >= u(src) {
					continue
				}
				// b's shards, the heaviest that fit the excess first.
				var out []move
				extra := map[string]float64{}
				need := excess * b.capacity
				for _, x := range slices.Backward(sortedByLoad(held[b.name])) {
					if need <= 1e-12 {
						break
					}
					if !movable(x) || x.load > need+0.5*s.load {
						continue
					}
					to, best := "", math.Inf(1)
					for _, c := range ms {
						if c.name == b.name || dedicated[c.name] != nil || !ok(x.name, c.name) {
							continue
						}
						v := (p.load[c.name] + extra[c.name] + x.load) / c.capacity
						if c.name == src { // a swap: src will have handed s on
							v = (p.load[c.name] - s.load + extra[c.name] + x.load) / c.capacity
						}
						if v <= bandHigh*level+1e-12 && v < best {
							to, best = c.name, v
						}
					}
					if to == "" {
						continue
					}
					out = append(out, move{shard: x.name, from: b.name, to: to})
					extra[to] += x.load
					need -= x.load
				}
				if need > 1e-12 {
					continue
				}
				for _, mv := range out {
					for _, x := range held[b.name] {
						if x.name == mv.shard {
							add(x, mv.to, "load")
							break
						}
					}
				}
				add(s, b.name, "load")
				return true
			}
		}
		return false
	}
	// fewestMoves plans the fewest hand-ons (at most fewestDepth, or
	// fewestDeep in a group of at most fewestDeepMembers) that bring src,
	// just gone above the band, to bandStop × level (else bandEdge), a
	// swap included, and reports whether it did. It adds only the moves of
	// members that take nothing in the plan; the others wait (stuck) until
	// what they take is under way.
	fewestMoves := func(src string) bool {
		fi := fewestInput{level: level, stop: bandStop, high: recvHigh, ok: ok}
		for i, m := range ms {
			fi.names = append(fi.names, m.name)
			fi.capacity = append(fi.capacity, m.capacity)
			fi.load = append(fi.load, p.load[m.name])
			fi.recv = append(fi.recv, dedicated[m.name] == nil)
			var cands []*bshard
			if dedicated[m.name] == nil {
				for _, s := range slices.Backward(sortedByLoad(held[m.name])) {
					if len(cands) == fewestCands {
						break
					}
					if movable(s) {
						cands = append(cands, s)
					}
				}
			}
			fi.cands = append(fi.cands, cands)
			if m.name == src {
				fi.src = i
			}
		}
		plan := fewest(fi)
		// A member above the band because a shard is under way to it
		// finishes a swap: like the receivers of the plan that began it,
		// it may end within the band rather than at bandStop, when that
		// takes fewer moves (and then stops there).
		for _, s := range held[src] {
			if s.pending {
				fi.stop = recvHigh
				if c := fewest(fi); c != nil && (plan == nil || len(c) < len(plan)) {
					plan, finished[src] = c, true
				}
				fi.stop = bandStop
				break
			}
		}
		if plan == nil {
			fi.stop = bandEdge // three moves that leave it a little under the band first; the rest as before
			plan = fewest(fi)
		}
		if plan == nil && len(ms) <= fewestDeepMembers {
			fi.stop, fi.depth, fi.from, fi.nodes = bandStop, fewestDeep, fewestDepth+1, fewestDeepNodes // one more move, within a bounded search
			if plan = fewest(fi); plan == nil {
				fi.stop = bandEdge
				plan = fewest(fi)
			}
		}
		takes := map[int]bool{} // members that take a shard in this plan
		for _, mv := range plan {
			if takes[mv.from] {
				// It hands on because it takes a shard of this plan:
				// it waits until that shard is under way, and plans
				// again from there, so that a plan changed meanwhile
				// (a load still rising) leaves no swap half made.
				stuck[ms[mv.from].name] = true
				continue
			}
			takes[mv.to] = true
			reason := "load"
			if empty[ms[mv.to].name] {
				reason = "join"
			}
			add(mv.s, ms[mv.to].name, reason)
		}
		return plan != nil
	}
	for range len(shards) * 2 {
		src := ""
		for _, m := range ms {
			if dedicated[m.name] != nil || stuck[m.name] {
				continue
			}
			limit := bandHigh * level
			if active[m.name] {
				limit = bandStop * level
			}
			if u(m.name) > limit+1e-12 && (src == "" || u(m.name) > u(src)) {
				src = m.name
			}
		}
		if src == "" {
			break
		}
		if !active[src] && fewestMoves(src) {
			active[src] = !finished[src]
			if finished[src] {
				stuck[src] = true
			}
			continue
		}
		active[src] = true
		// The best move that leaves the receiver within the band; if
		// none helps, the best that helps at all (the receiver then hands
		// on in turn).
		var best *bshard
		bestTo, bestF, bestCapped := "", u(src), false
		cs := byName[src].capacity
		for _, s := range held[src] {
			if !movable(s) {
				continue
			}
			for _, m := range ms {
				if m.name == src || dedicated[m.name] != nil || !ok(s.name, m.name) || u(m.name) >= level {
					continue
				}
				after := u(m.name) + s.load/m.capacity
				capped := after <= bandHigh*level+1e-12
				f := max(u(src)-s.load/cs, after)
				if f >= u(src)-1e-12 || !capped && bestCapped {
					continue
				}
				if best == nil || capped && !bestCapped || f < bestF-1e-12 ||
					math.Abs(f-bestF) <= 1e-12 && (s.load < best.load || s.load == best.load && (s.name < best.name || s.name == best.name && m.name < bestTo)) {
					best, bestTo, bestF, bestCapped = s, m.name, f, capped
				}
			}
		}
		if best == nil {
			// No single move helps: make room on a receiver first (its
			// small shards to others), then move there.
			if !makeRoom(src) {
				stuck[src] = true
			}
			continue
		}
		reason := "load"
		if empty[bestTo] {
			reason = "join"
		}
		add(best, bestTo, reason)
	}
	// Zones: each zone's load within 10 % of its share of the capacity,
	// while a move between the most and the least loaded zones helps.
	zones := map[string]bool{}
	for _, m := range ms {
		zones[m.zone] = true
	}
	for range len(shards) {
		if len(zones) < 2 {
			break
		}
		zl, zc := map[string]float64{}, map[string]float64{}
		for _, m := range ms {
			zl[m.zone] += p.load[m.name]
			zc[m.zone] += m.capacity
		}
		whole := total / capTotal
		hi, lo := "", ""
		for z := range zones {
			zu := zl[z] / zc[z]
			if hi == "" || zu > zl[hi]/zc[hi] || zu == zl[hi]/zc[hi] && z < hi {
				hi = z
			}
			if lo == "" || zu < zl[lo]/zc[lo] || zu == zl[lo]/zc[lo] && z < lo {
				lo = z
			}
		}
		uhi, ulo := zl[hi]/zc[hi], zl[lo]/zc[lo]
		if uhi <= bandHigh*whole && ulo >= whole/bandHigh {
			break
		}
		var best *bshard
		bestTo, bestF := "", uhi
		for _, a := range ms {
			if a.zone != hi || dedicated[a.name] != nil {
				continue
			}
			for _, s := range held[a.name] {
				if !movable(s) {
					continue
				}
				for _, b := range ms {
					if b.zone != lo || dedicated[b.name] != nil || !ok(s.name, b.name) ||
						u(b.name)+s.load/b.capacity > bandHigh*level+1e-12 {
						continue
					}
					f := max((zl[hi]-s.load)/zc[hi], (zl[lo]+s.load)/zc[lo])
					if f < bestF-1e-12 || best != nil && math.Abs(f-bestF) <= 1e-12 && (s.name < best.name || s.name == best.name && b.name < bestTo) {
						best, bestTo, bestF = s, b.name, f
					}
				}
			}
		}
		if best == nil {
			break
		}
		add(best, bestTo, "zone")
	}
	for i := range shards {
		p.owner[shards[i].name] = shards[i].owner
	}
	return p
}

// sortedByLoad is ss by load, the lightest first (then by name).
func sortedByLoad(ss []*bshard) []*bshard {
	out := slices.Clone(ss)
	slices.SortStableFunc(out, func(a, b *bshard) int {
		if c := cmp.Compare(a.load, b.load); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	return out
}

// sortedDedicated iterates the hosts of hot shards by name.
func sortedDedicated(d map[string]*bshard) func(func(string, *bshard) bool) {
	return func(yield func(string, *bshard) bool) {
		hosts := make([]string, 0, len(d))
		for h := range d {
			hosts = append(hosts, h)
		}
		slices.Sort(hosts)
		for _, h := range hosts {
			if !yield(h, d[h]) {
				return
			}
		}
	}
}

// leastLoaded is the member s leaves the least loaded per capacity, among
// those that may own it and do not host a hot shard, but not but.
func leastLoaded(ms []bmember, s *bshard, dedicated map[string]*bshard, ok func(string, string) bool, u func(string) float64, but string) string {
	to, best := "", math.Inf(1)
	for _, m := range ms {
		if m.name == but || m.name == s.owner || dedicated[m.name] != nil || !ok(s.name, m.name) {
			continue
		}
		if v := u(m.name) + s.load/m.capacity; v < best {
			best, to = v, m.name
		}
	}
	return to
}
