package shards

// One poll's decision, from one listing: each shard's load as the listing
// tells it, where each shard should be (the count plan while no shard of
// the group reports a load, the load balancer once one does), and the
// hand-ons of this round: every one the count plan makes, or the load
// balancer's first ones within the group-wide budget. Every replica that
// reads the same listing at the same time decides the same; each acts only
// on its own shards and on free shards planned to it.

import (
	"time"
)

// decision is what a replica decides from a listing.
type decision struct {
	byLoad  bool              // the load balancer decided (some shard reports a load)
	owner   map[string]string // shard → where it should be
	round   map[string]move   // shard → the hand-on this round makes of it
	moves   []move            // every hand-on the plan makes, in order
	load    map[string]float64
	known   map[string]bool    // the shard's load was reported (else it counts as the mean)
	members map[string]float64 // member → its load, where the shards are now
	level   float64            // the load per capacity the members are balanced to
	hot     []string
	// misplaced counts the shards not owned by their planned owner (free
	// ones included).
	misplaced int
	target    map[string]int // count plan: each member's share
	input     balanceInput   // what the load balancer planned from (byLoad, or lists or zones)
}

// waiting is how many more hand-ons the plan would make once every
// shard's cooldown has passed: moves that wait for it (0 for the count
// plan, which has none).
func (d decision) waiting() int {
	if d.input.members == nil {
		return 0
	}
	in := d.input
	in.cooldown = 0
	return max(0, len(balance(in).moves)-len(d.moves))
}

// imbalance is the largest load per capacity over the level, among the
// members that do not host a hot shard (1 when balanced exactly; 0 when
// nothing is known).
func (d decision) imbalance(weights map[string]int, hosts map[string]bool) float64 {
	if d.level <= 0 {
		return 0
	}
	worst := 0.0
	for m, l := range d.members {
		if w := weights[m]; w > 0 && !hosts[m] {
			worst = max(worst, l/float64(w)/d.level)
		}
	}
	return worst
}

// shardLoad is a shard's load as the listing tells it: the value its
// owner publishes, else the one its hand-off marker carries, else the mean
// of the owner's shards that did not fit its metadata, else (a shard taken
// free, or free) the load its blob last carried.
func (v view) shardLoad(s string) (float64, bool) {
	info := v.shards[s]
	if info.pendingTo != "" && info.hasCarried {
		return info.carried, true
	}
	m, ok := v.members[info.holder]
	if !info.leased || !ok {
		return info.lastLoad, info.hasLast // free: what its blob last carried
	}
	key := info.key
	if key == "" {
		key = loadKey(s)
	}
	if l, ok := m.loads[key]; ok {
		return l, true
	}
	if info.hasCarried {
		return info.carried, true
	}
	if m.restN > 0 {
		return m.restMu, true
	}
	return info.lastLoad, info.hasLast
}

// decide is a poll's decision on v for the group's shards. self and
// weight count this replica as a member before its membership is listed
// (self "": an observer). now and cooldown decide which shards moved too
// recently to move for load.
func (v view) decide(set shardSet, self string, weight int, zone string, now time.Time, cooldown time.Duration) decision {
	shards := set.names
	d := decision{load: make(map[string]float64, len(shards)), known: make(map[string]bool, len(shards)), members: map[string]float64{}}
	sum, n := 0.0, 0
	for _, s := range shards {
		if l, ok := v.shardLoad(s); ok {
			d.load[s], d.known[s] = l, true
			sum += l
			n++
		}
	}
	mean := 1.0
	if n > 0 {
		mean = sum / float64(n)
	}
	for _, s := range shards {
		if !d.known[s] {
			d.load[s] = mean
		}
	}
	in := v.input(shards, self, weight)
	for _, m := range in.members {
		d.members[m.name] = 0
	}
	for _, s := range shards {
		if o := in.owner[s]; o != "" {
			if _, live := d.members[o]; live {
				d.members[o] += d.load[s]
			}
		}
	}
	d.byLoad = n > 0 && sum > 0
	d.round = map[string]move{}
	zones := map[string]string{}
	for _, m := range v.members {
		zones[m.name] = m.zone
	}
	if self != "" {
		zones[self] = zone
	}
	distinct := map[string]bool{}
	for _, z := range zones {
		distinct[z] = true
	}
	if !d.byLoad && set.eligible == nil && len(distinct) <= 1 {
		p := plan(in)
		a := assess(in, p)
		d.owner, d.misplaced, d.target = p, a.misplaced, a.target
		for _, s := range shards {
			if o := in.owner[s]; o != "" && p[s] != "" && p[s] != o {
				if _, live := d.members[o]; live {
					mv := move{shard: s, from: o, to: p[s], reason: "join"}
					d.moves = append(d.moves, mv)
					d.round[s] = mv
				}
			}
		}
		total, weights := 0.0, 0
		for _, m := range in.members {
			weights += m.weight
		}
		for _, l := range d.load {
			total += l
		}
		if weights > 0 {
			d.level = total / float64(weights)
		}
		return d
	}
	// By load (or by count, as unit loads, when lists differ or zones
	// are set).
	bi := balanceInput{now: now, cooldown: cooldown, eligible: set.eligible}
	for _, m := range in.members {
		bi.members = append(bi.members, bmember{name: m.name, capacity: float64(m.weight), zone: zones[m.name]})
	}
	inflight := 0
	for _, s := range shards {
		info := v.shards[s]
		b := bshard{name: s, owner: in.owner[s], load: d.load[s], known: d.known[s], pending: info.pendingTo != ""}
		if !d.byLoad {
			b.load = 1
		}
		if b.pending {
			inflight++
		}
		b.pinned = now.Before(info.pinned)
		if info.handedIn {
			b.since = info.since // this term began by a hand-on: its cooldown
		}
		bi.shards = append(bi.shards, b)
	}
	p := balance(bi)
	d.owner, d.moves, d.level, d.hot = p.owner, p.moves, p.level, p.hot
	d.input = bi
	for _, mv := range d.moves[:min(len(d.moves), max(0, moveBudget(len(shards))-inflight))] {
		d.round[mv.shard] = mv
	}
	live := map[string]bool{}
	for _, m := range in.members {
		live[m.name] = true
	}
	for _, s := range shards {
		if o := in.owner[s]; o != d.owner[s] || !live[o] {
			d.misplaced++
		}
	}
	return d
}
