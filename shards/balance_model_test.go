package shards

// A fast model of a group balancing by load, for many seeds: the balancer
// itself (balance, moveBudget, the publication rules of keepMembership)
// with members that poll on their own jittered cadence, publish their
// smoothed loads as a replica does, announce the shards each round hands
// them, and hand on their own shards only once the receiver announced
// them; a hand-off takes the drain plus a round trip, then the receiver's
// next poll. Loads follow Zipf(s) with noise redrawn every second. What
// it measures is the targets: max/mean load per capacity in the
// steady state, moves against an offline greedy's, moves back and forth
// under noise, and the reaction to a shard whose load jumps tenfold.

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type modelConfig struct {
	k, n       int
	zipf       float64
	noise      float64       // each shard's rate is its base × (1 ± noise), redrawn every second
	poll       time.Duration // 2 s, jittered ±20 %
	drain      time.Duration // from the owner's decision to the lease changed
	neighbours bool          // the heaviest shards have neighbouring names (the count plan gives them to one member)
	capacities []float64     // nil: all 1
}

type modelShard struct {
	name      string
	base      float64
	owner     string
	pendingTo string
	doneAt    time.Time // the hand-off's lease change
	handedIn  time.Time // when its owner's term began by a hand-on (zero: not)
	carried   float64
	meter     loadMeter
}

type modelMember struct {
	name      string
	capacity  float64
	nextPoll  time.Time
	published map[string]float64 // shard → load, as its membership says
	pub       *announcement
	pubAt     time.Time
	announced map[string]bool // shards its last round hands to it
}

type loadModel struct {
	cfg     modelConfig
	rng     *rand.Rand
	now     time.Time
	shards  []*modelShard
	byName  map[string]*modelShard
	members []*modelMember
	rate    map[string]float64 // this second's noisy rate
	moves   []modelMove
	// listed measures the shards' loads as the listing tells them rather
	// than their base loads.
	listed bool
}

type modelMove struct {
	at              time.Time
	shard, from, to string
	reason          string
}

func newLoadModel(cfg modelConfig, seed uint64) *loadModel {
	m := &loadModel{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0xba1a)), now: time.Unix(1_700_000_000, 0), byName: map[string]*modelShard{}, rate: map[string]float64{}}
	ranks := make([]int, cfg.k)
	for i := range ranks {
		ranks[i] = i
	}
	if !cfg.neighbours {
		m.rng.Shuffle(len(ranks), func(i, j int) { ranks[i], ranks[j] = ranks[j], ranks[i] })
	}
	for i := range cfg.k {
		s := &modelShard{name: strconv.Itoa(i), base: 1 / math.Pow(float64(ranks[i]+1), cfg.zipf)}
		m.shards = append(m.shards, s)
		m.byName[s.name] = s
	}
	for i := range cfg.n {
		c := 1.0
		if cfg.capacities != nil {
			c = cfg.capacities[i]
		}
		m.members = append(m.members, &modelMember{name: fmt.Sprintf("m%02d", i), capacity: c,
			nextPoll: m.now.Add(time.Duration(m.rng.Int64N(int64(cfg.poll)))), published: map[string]float64{}, announced: map[string]bool{}, pub: &announcement{}})
	}
	// Count-balanced: the count plan from nothing.
	in := planInput{owner: map[string]string{}}
	for _, mm := range m.members {
		in.members = append(in.members, member{name: mm.name, weight: int(mm.capacity)})
	}
	for _, s := range m.shards {
		in.shards = append(in.shards, s.name)
	}
	p := plan(in)
	for _, s := range m.shards {
		s.owner = p[s.name]
		s.meter.set(s.base, m.now)
	}
	for _, mm := range m.members {
		m.publish(mm, true)
	}
	m.drawRates()
	return m
}

func (m *loadModel) member(name string) *modelMember {
	for _, mm := range m.members {
		if mm.name == name {
			return mm
		}
	}
	return nil
}

func (m *loadModel) drawRates() {
	for _, s := range m.shards {
		m.rate[s.name] = s.base * (1 + m.cfg.noise*(2*m.rng.Float64()-1))
	}
}

// publish writes mm's membership's loads if due, as keepMembership does
// (and loadsCross); ok when it wrote nothing and planned on the listing as
// it stands (now: the poll's plan).
func (m *loadModel) publish(mm *modelMember, force bool) (now balancePlan, ok bool) {
	var items []loadItem
	for _, s := range m.shards {
		if s.owner == mm.name {
			if v, ok := s.meter.value(m.now); ok {
				items = append(items, loadItem{name: s.name, v: v})
			}
		}
	}
	next := &announcement{}
	next.loads, next.rest = formatLoads(items)
	big, small := loadsChanged(mm.pub, next)
	publish := func() map[string]float64 {
		out := map[string]float64{}
		keys := parseLoads(next.loads)
		for _, it := range items {
			if v, ok := keys[loadKey(it.name)]; ok {
				out[it.name] = v
			}
		}
		return out
	}
	if force || big || small && m.now.Sub(mm.pubAt) >= loadRepublish {
		mm.pub, mm.pubAt = next, m.now
		mm.published = publish()
		return now, false
	}
	if !small {
		return now, false
	}
	// loadsCross: a replica sees on its last listing (the model lists at
	// every poll: the group as it stands) that its new loads take the
	// group, calm, out of its calm, and publishes them at once; it
	// filters with inputNearBand as the replica does with nearBand.
	was := mm.published
	mm.published = publish()
	in := m.input()
	mm.published = was
	if !inputNearBand(in) {
		return now, false
	}
	now = balance(m.input())
	if modelCalm(now) && !modelCalm(balance(in)) {
		mm.pub, mm.pubAt = next, m.now
		mm.published = publish()
		return now, false
	}
	return now, true
}

// modelCalm reports whether a plan moves nothing, as a calm decision
// does (the model has no free shard).
func modelCalm(p balancePlan) bool { return len(p.moves) == 0 }

// input is the listing as mm's poll sees it.
func (m *loadModel) input() balanceInput {
	in := balanceInput{now: m.now, cooldown: DefaultCooldown}
	for _, mm := range m.members {
		in.members = append(in.members, bmember{name: mm.name, capacity: mm.capacity})
	}
	known, sum := 0, 0.0
	loads := make([]float64, len(m.shards))
	has := make([]bool, len(m.shards))
	for i, s := range m.shards {
		switch {
		case s.pendingTo != "":
			loads[i], has[i] = s.carried, true
		default:
			if v, ok := m.member(s.owner).published[s.name]; ok {
				loads[i], has[i] = v, true
			} else if !s.handedIn.IsZero() {
				loads[i], has[i] = s.carried, true
			}
		}
		if has[i] {
			known++
			sum += loads[i]
		}
	}
	for i, s := range m.shards {
		b := bshard{name: s.name, owner: s.owner, load: loads[i], known: has[i], pending: s.pendingTo != "", since: s.handedIn}
		if b.pending {
			b.owner = s.pendingTo
		}
		if !has[i] {
			b.load = sum / float64(max(known, 1))
		}
		in.shards = append(in.shards, b)
	}
	return in
}

// poll is mm's poll: publish, plan, announce, hand on.
func (m *loadModel) poll(mm *modelMember) {
	p, ok := m.publish(mm, false)
	if !ok {
		p = balance(m.input())
	}
	inflight := 0
	for _, s := range m.shards {
		if s.pendingTo != "" {
			inflight++
		}
	}
	round := p.moves[:min(len(p.moves), max(0, moveBudget(len(m.shards))-inflight))]
	mm.announced = map[string]bool{}
	for _, mv := range round {
		if mv.to == mm.name {
			mm.announced[mv.shard] = true
		}
	}
	for _, mv := range round {
		s := m.byName[mv.shard]
		if mv.from != mm.name || s.owner != mm.name || s.pendingTo != "" || !m.member(mv.to).announced[mv.shard] {
			continue
		}
		v, _ := s.meter.value(m.now)
		s.pendingTo, s.doneAt, s.carried = mv.to, m.now.Add(m.cfg.drain), quantize(v)
		m.moves = append(m.moves, modelMove{at: m.now, shard: s.name, from: mm.name, to: mv.to, reason: mv.reason})
	}
	// Take what was handed here.
	for _, s := range m.shards {
		if s.pendingTo == mm.name && !m.now.Before(s.doneAt) {
			s.owner, s.pendingTo, s.handedIn = mm.name, "", m.now
			s.meter = loadMeter{}
			s.meter.carry(s.carried, m.now)
		}
	}
}

// step advances the model by dt, in polls.
func (m *loadModel) run(d time.Duration, sample func()) {
	end := m.now.Add(d)
	nextSecond := m.now.Truncate(time.Second).Add(time.Second)
	for m.now.Before(end) {
		next := nextSecond
		var who *modelMember
		for _, mm := range m.members {
			if mm.nextPoll.Before(next) {
				next, who = mm.nextPoll, mm
			}
		}
		// The meters follow the rates until next.
		m.now = next
		for _, s := range m.shards {
			s.meter.set(m.rate[s.name], m.now)
		}
		if who != nil {
			m.poll(who)
			who.nextPoll = m.now.Add(time.Duration(float64(m.cfg.poll) * (0.8 + 0.4*m.rng.Float64())))
			continue
		}
		nextSecond = nextSecond.Add(time.Second)
		m.drawRates()
		if sample != nil {
			sample()
		}
	}
}

// truth is the members' loads by the shards' base loads, where they are
// (a shard being handed on counts at its owner).
func (m *loadModel) truth() map[string]float64 {
	out := map[string]float64{}
	for _, mm := range m.members {
		out[mm.name] = 0
	}
	loads := m.loads()
	for _, s := range m.shards {
		out[s.owner] += loads[s.name]
	}
	return out
}

// loads is every shard's load as the measure sees it (see loadOf).
func (m *loadModel) loads() map[string]float64 {
	out := make(map[string]float64, len(m.shards))
	if m.listed {
		for _, b := range m.input().shards {
			out[b.name] = b.load
		}
		return out
	}
	for _, s := range m.shards {
		out[s.name] = s.base
	}
	return out
}

// maxOverMean is the largest load per capacity over the mean, by base
// loads.
func (m *loadModel) maxOverMean() float64 {
	t := m.truth()
	total, capTotal, worst := 0.0, 0.0, 0.0
	for _, mm := range m.members {
		total += t[mm.name]
		capTotal += mm.capacity
		worst = max(worst, t[mm.name]/mm.capacity)
	}
	return worst / (total / capTotal)
}

// inBand reports whether the group is within the band by base loads: hot
// shards alone on their member, every other member at most bandHigh × the
// level of the others.
func (m *loadModel) inBand() bool {
	in := balanceInput{now: m.now, cooldown: 0}
	for _, mm := range m.members {
		in.members = append(in.members, bmember{name: mm.name, capacity: mm.capacity})
	}
	loads := m.loads()
	for _, s := range m.shards {
		in.shards = append(in.shards, bshard{name: s.name, owner: s.owner, load: loads[s.name], known: true})
	}
	p := balance(in)
	t := m.truth()
	hosts := map[string]string{}
	for _, h := range p.hot {
		hosts[m.byName[h].owner] = h
	}
	for _, mm := range m.members {
		if h, ok := hosts[mm.name]; ok {
			for _, s := range m.shards {
				if s.owner == mm.name && s.name != h {
					return false
				}
			}
			continue
		}
		if t[mm.name]/mm.capacity > bandHigh*p.level+1e-9 {
			return false
		}
	}
	return true
}

// offlineGreedy is how many moves a greedy with every load known and no
// limit needs from the assignment owner to max/mean ≤ target: each move
// the single shard that most lowers the larger of the two members' loads,
// from the most loaded member.
func offlineGreedy(owner map[string]string, loads map[string]float64, capacity map[string]float64, target float64) int {
	own := map[string]string{}
	for s, o := range owner {
		own[s] = o
	}
	load := map[string]float64{}
	total, capTotal := 0.0, 0.0
	for m, c := range capacity {
		load[m] = 0
		capTotal += c
	}
	for s, o := range own {
		load[o] += loads[s]
		total += loads[s]
	}
	level := total / capTotal
	names := make([]string, 0, len(own))
	for s := range own {
		names = append(names, s)
	}
	slices.Sort(names)
	members := make([]string, 0, len(capacity))
	for m := range capacity {
		members = append(members, m)
	}
	slices.Sort(members)
	moves := 0
	for range len(names) * 2 {
		src := ""
		for _, m := range members {
			if src == "" || load[m]/capacity[m] > load[src]/capacity[src] {
				src = m
			}
		}
		if load[src]/capacity[src] <= target*level {
			return moves
		}
		bestS, bestTo, bestF := "", "", load[src]/capacity[src]
		for _, s := range names {
			if own[s] != src {
				continue
			}
			for _, m := range members {
				if m == src {
					continue
				}
				f := max((load[src]-loads[s])/capacity[src], (load[m]+loads[s])/capacity[m])
				if f < bestF-1e-12 {
					bestS, bestTo, bestF = s, m, f
				}
			}
		}
		if bestS == "" {
			return moves
		}
		load[src] -= loads[bestS]
		load[bestTo] += loads[bestS]
		own[bestS] = bestTo
		moves++
	}
	return moves
}

func (m *loadModel) owners() (map[string]string, map[string]float64, map[string]float64) {
	own, loads, caps := map[string]string{}, map[string]float64{}, map[string]float64{}
	for _, s := range m.shards {
		own[s.name], loads[s.name] = s.owner, s.base
	}
	for _, mm := range m.members {
		caps[mm.name] = mm.capacity
	}
	return own, loads, caps
}

// backAndForth counts moves of a shard back to a member it left within
// window, among moves.
func backAndForth(moves []modelMove, window time.Duration) int {
	n := 0
	for i, a := range moves {
		for _, b := range moves[i+1:] {
			if b.shard == a.shard && b.to == a.from && b.at.Sub(a.at) <= window {
				n++
				break
			}
		}
	}
	return n
}

// modelResult is one seed's figures.
type modelResult struct {
	startRatio  float64       // max/mean count-balanced
	converged   time.Duration // to max/mean ≤ bandHigh from the count-balanced start
	moves       int           // to converge
	greedy      int           // the offline greedy's moves from the same start
	steadyP99   float64       // max/mean p99 over the steady samples, by base loads
	smoothP99   float64       // the same by the loads listed
	steadyMoves int           // moves in the steady window
	backForth   int           // of those, back to a member the shard left within 10 min
	jumpBack    time.Duration // from the jump to in band again (-1: never within the run)
	jumpMoves   int
	jumpGreedy  int // the offline greedy's moves from the state at the jump
	jumpHot     bool
	jumpBound   int // the fewest moves any balancer needs to bring the group back in band (jumpLowerBound)
	jumpFewest  int // the same, exact up to jumpExactDepth; jumpExactDepth + 1: more (jumpFewestMoves)
}

// jumpLowerBound is a lower bound on the moves any balancer needs, after
// shard j's load jumped, to bring the group back in band as inBand
// measures it (loads as in, the level and hot shards as p). Whoever ends
// up hosting j, H (its owner o, or another member at the cost of j's
// move), must be within bandHigh × the level (hold j alone when j is hot):
// it hands on at least its excess E_H, so (a) at least k_H of its other
// shards, the fewest whose loads sum to E_H being its heaviest; and (b)
// the members that take in more than they hand on stay within the band,
// so each takes in at most its room (bandHigh × level × capacity − load;
// o's without j when H is not o), and at least q_H of them, the fewest
// whose rooms sum to E_H, take in a move each. So any plan makes at least
// max(k_H, q_H) moves, plus j's when H is not o, for its H. Receivers
// that make room by handing on in turn only add moves.
func jumpLowerBound(in balanceInput, p balancePlan, j string) int {
	var js bshard
	held := map[string][]float64{}
	load := map[string]float64{}
	for _, s := range in.shards {
		if s.name == j {
			js = s
			continue
		}
		held[s.owner] = append(held[s.owner], s.load)
		load[s.owner] += s.load
	}
	hot := slices.Contains(p.hot, j)
	fewest := func(xs []float64, need float64) int { // the fewest of xs summing to need
		xs = slices.Clone(xs)
		slices.Sort(xs)
		n := 0
		for i := len(xs) - 1; i >= 0 && need > 1e-12; i-- {
			need -= xs[i]
			n++
		}
		if need > 1e-12 {
			return len(in.shards)
		}
		return n
	}
	bound := len(in.shards)
	for _, h := range in.members {
		excess := load[h.name] + js.load - bandHigh*p.level*h.capacity
		k := fewest(held[h.name], excess)
		if hot {
			excess, k = load[h.name], len(held[h.name])
		}
		var rooms []float64
		for _, m := range in.members {
			if m.name == h.name {
				continue
			}
			l := load[m.name] // without j
			if m.name == js.owner && h.name == js.owner {
				l += js.load
			}
			if r := bandHigh*p.level*m.capacity - l; r > 0 {
				rooms = append(rooms, r)
			}
		}
		b := max(k, fewest(rooms, excess))
		if h.name != js.owner {
			b++
		}
		bound = min(bound, b)
	}
	return bound
}

// jumpExactDepth is how deep jumpFewestMoves searches: the 3.
const jumpExactDepth = 3

// jumpFewestMoves is the fewest moves, up to jumpExactDepth, after which
// every member is within bandHigh × the level (loads as in, the level as
// p), by any balancer that knows every load (no cooldown, any receiver, a
// shard moves once); jumpExactDepth + 1 when more are needed. Unlike
// jumpLowerBound it counts that a shard must fit its receiver's room: a
// complete search, since a member above the band must hand on one of its
// own shards in any plan that brings it back, so branching on the most
// loaded member's shards and every receiver misses no plan. Where a shard
// is hot, its host must hand on all its others: bound, the lower bound
// that counts them, decides.
func jumpFewestMoves(in balanceInput, p balancePlan, bound int) int {
	if len(p.hot) > 0 || bound > jumpExactDepth {
		return min(bound, jumpExactDepth+1)
	}
	idx := map[string]int{}
	for i, m := range in.members {
		idx[m.name] = i
	}
	n := len(in.members)
	load, limit := make([]float64, n), make([]float64, n)
	held := make([][]int, n)
	for i, s := range in.shards {
		o := idx[s.owner]
		load[o] += s.load
		held[o] = append(held[o], i)
	}
	for i, m := range in.members {
		limit[i] = bandHigh * p.level * m.capacity
	}
	moved := make([]bool, len(in.shards))
	const eps = 1e-9
	var dfs func(d int) bool
	dfs = func(d int) bool {
		a, over := -1, 0
		for i := range n {
			if load[i] > limit[i]+eps {
				over++
				if a < 0 || load[i]-limit[i] > load[a]-limit[a] {
					a = i
				}
			}
		}
		if over == 0 {
			return true
		}
		if over > d {
			return false
		}
		for _, si := range held[a] {
			x := in.shards[si].load
			if moved[si] || d == 1 && load[a]-x > limit[a]+eps {
				continue
			}
			for r := range n {
				if r == a || d == 1 && load[r]+x > limit[r]+eps {
					continue
				}
				moved[si] = true
				load[a], load[r] = load[a]-x, load[r]+x
				ok := dfs(d - 1)
				load[a], load[r] = load[a]+x, load[r]-x
				moved[si] = false
				if ok {
					return true
				}
			}
		}
		return false
	}
	for d := bound; d <= jumpExactDepth; d++ {
		if dfs(d) {
			return d
		}
	}
	return jumpExactDepth + 1
}

// runModel plays one seed: converge from count-balanced, 10 minutes of
// steady state under noise, then one shard ×10 and 5 minutes more.
func runModel(cfg modelConfig, seed uint64) modelResult {
	m := newLoadModel(cfg, seed)
	var r modelResult
	r.startRatio = m.maxOverMean()
	own, loads, caps := m.owners()
	r.greedy = offlineGreedy(own, loads, caps, bandHigh)
	start := m.now
	var convergedAt time.Time
	m.run(5*time.Minute, func() {
		if convergedAt.IsZero() && m.inBand() && m.maxOverMean() <= bandHigh {
			convergedAt = m.now
			r.moves = len(m.moves)
		}
	})
	if convergedAt.IsZero() {
		r.converged, r.moves = -1, len(m.moves)
	} else {
		r.converged = convergedAt.Sub(start)
	}
	before := len(m.moves)
	var samples, smooth []float64
	m.run(10*time.Minute, func() {
		samples = append(samples, m.maxOverMean())
		m.listed = true
		smooth = append(smooth, m.maxOverMean())
		m.listed = false
	})
	r.steadyP99, r.smoothP99 = quantileF(samples, 0.99), quantileF(smooth, 0.99)
	steady := m.moves[before:]
	r.steadyMoves, r.backForth = len(steady), backAndForth(steady, 10*time.Minute)
	// One shard's load jumps tenfold.
	s := m.shards[m.rng.IntN(len(m.shards))]
	s.base *= 10
	m.drawRates()
	own, loads, caps = m.owners()
	r.jumpGreedy = offlineGreedy(own, loads, caps, bandHigh)
	{
		in := balanceInput{now: m.now}
		for _, mm := range m.members {
			in.members = append(in.members, bmember{name: mm.name, capacity: mm.capacity})
		}
		for _, x := range m.shards {
			in.shards = append(in.shards, bshard{name: x.name, owner: x.owner, load: x.base, known: true})
		}
		bp := balance(in)
		r.jumpHot = len(bp.hot) > 0
		r.jumpBound = jumpLowerBound(in, bp, s.name)
		r.jumpFewest = jumpFewestMoves(in, bp, r.jumpBound)
	}
	before = len(m.moves)
	// Back in band: the first sample from which the group stays in the
	// band (as it sees it, by the loads listed) for 30 s, within 5 minutes.
	var in []bool
	var movesAt []int
	m.listed = true
	m.run(5*time.Minute, func() {
		in = append(in, m.inBand())
		movesAt = append(movesAt, len(m.moves)-before)
	})
	r.jumpBack, r.jumpMoves = -1, len(m.moves)-before
	for i := range in { // the earliest such sample
		ok := i+30 <= len(in)
		for j := i; ok && j < i+30; j++ {
			ok = in[j]
		}
		if ok {
			r.jumpBack, r.jumpMoves = time.Duration(i+1)*time.Second, movesAt[i]
			break
		}
	}
	return r
}

func quantileF(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func quantileD(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return -1
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func quantileI(xs []int, p float64) int {
	if len(xs) == 0 {
		return -1
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// modelSeeds: $AZLEASE_MODEL_SEEDS, else 2 (-short: 1): each seed
// simulates 20 minutes of a group for each layout of the loads, about a
// second of CPU each (four with -race: two seeds cost make test about
// 16 s). Its quantile targets need 20 seeds or more, so make test's run
// checks only that the model plays and balances; the figures in
// bench/results.md come from 200 seeds (and 1,000 a layout for the ×10
// jump's moves), run on every core:
//
//	AZLEASE_MODEL_SEEDS=200 go test -run TestLoadBalancerModel -v ./shards
func modelSeeds() int {
	if n, err := strconv.Atoi(os.Getenv("AZLEASE_MODEL_SEEDS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 1
	}
	return 2
}

// TestLoadBalancerModel plays the model for many seeds, Zipf(0.8) loads on
// 256 shards over 8 members with ±20 % noise, and checks the issue's
// targets: max/mean ≤ 1.10 at p99 of the steady samples; no move back and
// forth under noise; from a count-balanced start, at most 1.3 × the moves
// of an offline greedy (over all seeds); after one shard's load jumps
// tenfold, back within the band in 30 s p50 and 60 s p99, with at most 3
// moves at p90 over the jumps that leave the shard within a replica's
// share (one that makes it hot sends its replica's other shards away,
// 20 to 38 moves whoever balances), at most 3 at p90 where the offline
// greedy needs 3 or fewer, and at most one more than the greedy's at p90
// otherwise.
func TestLoadBalancerModel(t *testing.T) {
	var report []string
	defer func() {
		if path := os.Getenv("AZLEASE_MODEL_REPORT"); path != "" {
			head := fmt.Sprintf("The balancer's pure model (shards/balance_model_test.go: the package's balance, budget and publication rules, members\n"+
				"polling every 2 s ± 20 %%, a hand-off taking 1.5 s then the receiver's poll), K = 256, N = 8, Zipf(0.8), ±20 %% noise, %d seeds:\n\n", modelSeeds())
			if err := os.WriteFile(path, []byte(head+strings.Join(report, "\n")+"\n"), 0o644); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, neighbours := range []bool{false, true} {
		t.Run(fmt.Sprintf("neighbours=%v", neighbours), func(t *testing.T) {
			cfg := modelConfig{k: 256, n: 8, zipf: 0.8, noise: 0.2, poll: 2 * time.Second, drain: 1500 * time.Millisecond, neighbours: neighbours}
			var (
				over                     []int // moves beyond the offline greedy's after the jump
				bounds                   []int // the fewest moves any balancer needs after the jump (jumpLowerBound)
				fewests                  []int // the same, exact up to jumpExactDepth (jumpFewestMoves)
				needMore, hots           int   // seeds where any balancer needs more than jumpExactDepth; of them, hot
				small                    []int // moves after jumps the greedy fixes with 3 or fewer
				within                   []int // moves after jumps that leave the shard within a replica's share (not hot)
				p99s                     []float64
				conv, jumps              []time.Duration
				moves, greedy, jumpMoves []int
				sumMoves, sumGreedy      int
				steady, backForth        int
				starts                   []float64
			)
			// The seeds in parallel (each is a pure function of its
			// seed): 1,000 a layout take 20 CPU-minutes.
			results := make([]modelResult, modelSeeds())
			next := make(chan int)
			var wg sync.WaitGroup
			for range runtime.GOMAXPROCS(0) {
				wg.Go(func() {
					for i := range next {
						results[i] = runModel(cfg, uint64(i))
					}
				})
			}
			for i := range results {
				next <- i
			}
			close(next)
			wg.Wait()
			for seed, r := range results {
				starts = append(starts, r.startRatio)
				p99s = append(p99s, r.steadyP99)
				conv = append(conv, r.converged)
				moves, greedy = append(moves, r.moves), append(greedy, r.greedy)
				sumMoves += r.moves
				sumGreedy += r.greedy
				steady += r.steadyMoves
				backForth += r.backForth
				jumps = append(jumps, r.jumpBack)
				jumpMoves = append(jumpMoves, r.jumpMoves)
				bounds = append(bounds, r.jumpBound)
				fewests = append(fewests, r.jumpFewest)
				if r.jumpFewest > jumpExactDepth {
					needMore++
					if r.jumpHot {
						hots++
					}
				}
				over = append(over, r.jumpMoves-r.jumpGreedy)
				if r.jumpGreedy <= 3 {
					small = append(small, r.jumpMoves)
				}
				if !r.jumpHot {
					within = append(within, r.jumpMoves)
				}
				if r.jumpBack < 0 {
					t.Errorf("seed %d: never back in the band after the jump", seed)
				}
				if os.Getenv("AZLEASE_MODEL_VERBOSE") != "" {
					t.Logf("seed %d: converge %d moves (greedy %d) in %v; jump back %v, %d moves (bound %d, fewest %d, greedy %d, hot %v)", seed, r.moves, r.greedy, r.converged, r.jumpBack, r.jumpMoves, r.jumpBound, r.jumpFewest, r.jumpGreedy, r.jumpHot)
				}
			}
			line := fmt.Sprintf("- heaviest shards %s: count-balanced max/mean p50 %.2f; converged in p50 %v p90 %v; moves p50 %d (greedy %d), total %d vs %d (×%.2f); steady max/mean p99 (worst seed) %.3f, %d moves, %d back and forth; ×10 jump: back in p50 %v p99 %v, moves p90 %d (where the shard stays within a replica's share, p90 %d over %d seeds; beyond the offline greedy's p90 %+d; where it needs 3 or fewer, p90 %d; any balancer needs p90 %d or more, exactly p90 %d: more than %d moves in %d seeds of %d, %d of them where the shard became hot)",
				map[bool]string{true: "with neighbouring names", false: "scattered"}[neighbours],
				quantileF(starts, 0.5), quantileD(conv, 0.5), quantileD(conv, 0.9), quantileI(moves, 0.5), quantileI(greedy, 0.5),
				sumMoves, sumGreedy, float64(sumMoves)/float64(sumGreedy), slices.Max(p99s), steady, backForth,
				quantileD(jumps, 0.5), quantileD(jumps, 0.99), quantileI(jumpMoves, 0.9), quantileI(within, 0.9), len(within), quantileI(over, 0.9), quantileI(small, 0.9), quantileI(bounds, 0.9), quantileI(fewests, 0.9), jumpExactDepth, needMore, len(fewests), hots)
			t.Log(line)
			report = append(report, line)
			// A target missed fails the test, or, when the model writes the
			// benchmark's report (make bench), is said there.
			miss := func(format string, args ...any) {
				if os.Getenv("AZLEASE_MODEL_REPORT") != "" {
					report = append(report, "  target missed: "+fmt.Sprintf(format, args...))
					return
				}
				t.Errorf(format, args...)
			}
			if w := slices.Max(p99s); w > 1.10 {
				miss("steady max/mean p99 %.3f > 1.10", w)
			}
			if backForth > 0 {
				miss("%d moves back and forth under noise", backForth)
			}
			if float64(sumMoves) > 1.3*float64(sumGreedy) {
				miss("%d moves to converge, %d for the offline greedy: more than 1.3 ×", sumMoves, sumGreedy)
			}
			if len(jumps) < 20 {
				t.Logf("%d seeds: the quantile targets (jump reaction and moves) are checked with 20 or more (AZLEASE_MODEL_SEEDS)", len(jumps))
				return
			}
			if q := quantileD(jumps, 0.5); q > 30*time.Second || q < 0 {
				miss("jump back p50 %v > 30 s", q)
			}
			if q := quantileD(jumps, 0.99); q > 60*time.Second || q < 0 {
				miss("jump back p99 %v > 60 s", q)
			}
			// A jump that makes the shard heavier than a replica's share
			// must leave it alone on its replica (the hot rule):
			// every other shard there goes, 20 to 38 moves whoever makes
			// them. The ≤ 3 moves at p90 are for the jumps that leave it
			// within the share; and at most 3 where 3 suffice, and no more
			// than the greedy's elsewhere.
			if q := quantileI(within, 0.9); q > 3 {
				miss("jump moves p90 %d > 3 where the shard stays within a replica's share", q)
			}
			if q := quantileI(small, 0.9); q > 3 {
				miss("jump moves p90 %d > 3 where the offline greedy needs 3 or fewer", q)
			}
			if q := quantileI(over, 0.9); q > 1 {
				miss("jump moves p90 %+d beyond the offline greedy's", q)
			}
		})
	}
}

var _ = cmp.Compare[int]
