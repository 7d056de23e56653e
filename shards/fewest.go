package shards

// The fewest hand-ons that bring one member above the band back: a small,
// bounded search the balancer makes before it sheds shards one at a time.
// A pure function of the loads it is given (ties by the order of the
// members, by name, and of the shards, the heaviest first), so every
// replica finds the same moves from the same listing.

import (
	"cmp"
	"slices"
)

// fewestDepth is the most hand-ons the search looks for; fewestCands how
// many of a member's heaviest movable shards it tries.
const (
	fewestDepth = 3
	fewestCands = 6
	// fewestRecv bounds the receivers tried for a shard, of each kind
	// (where it fits; where it starts a swap): the search stays small in a
	// group of 64 replicas, and tries every receiver in one of 8.
	fewestRecv = 8
	// fewestDeep is the most hand-ons of a second search, made when none
	// of fewestDepth brings the member back, in groups of at most
	// fewestDeepMembers.
	fewestDeep        = 4
	fewestDeepMembers = 16
	fewestDeepNodes   = 5000
)

// fewestInput is what the search knows: members by index (sorted by name),
// their loads and capacities, and the shards each may hand on, the
// heaviest first.
type fewestInput struct {
	names    []string
	capacity []float64
	load     []float64
	cands    [][]*bshard                 // member → its movable shards, the heaviest first, at most fewestCands
	recv     []bool                      // member may take shards (not given to a hot shard)
	ok       func(shard, to string) bool // the member's list allows it
	level    float64
	src      int
	stop     float64 // src ends at most stop × level
	high     float64 // every other member ends within high × level, or no higher than it was
	depth    int     // the most hand-ons; 0: fewestDepth
	from     int     // the fewest hand-ons looked for (fewer were looked for already)
	nodes    int     // the most steps of the search; 0: no bound
}

// fmove is a hand-on the search plans, by member index.
type fmove struct {
	s        *bshard
	from, to int
}

// fewest is the fewest hand-ons, from in.from to in.depth (1 to
// fewestDepth unless set), within in.nodes steps, after which src is
// at most stop × level and no other member above the band (a member above
// it already no higher than it was); the first move is src's, a receiver
// is below the level when it takes a shard, a shard moves once, and a
// receiver that goes above the band on the way hands on in turn, as many
// as the moves left allow (a swap).
// Among plans of that many moves, the one that leaves the most loaded of
// the members it touches the least loaded. nil when there is none.
func fewest(in fewestInput) []fmove {
	n := len(in.names)
	const eps = 1e-12
	load := append([]float64(nil), in.load...)
	limit := make([]float64, n)
	for i := range n {
		limit[i] = max(in.high*in.level*in.capacity[i], load[i])
	}
	limit[in.src] = in.stop * in.level * in.capacity[in.src]
	moved := map[*bshard]bool{}
	touched := make([]int, n)
	touched[in.src]++
	lastFrom := make([]int, n) // the candidate index of the last move from each member: moves from one member go heaviest first, so each set is tried once
	for i := range lastFrom {
		lastFrom[i] = -1
	}
	var (
		path      []fmove
		best      []fmove
		bestScore float64
	)
	overs := func() (out []int) {
		for i := range n {
			if load[i] > limit[i]+eps {
				out = append(out, i)
			}
		}
		return out
	}
	// heaviestLeft is the sum of the k heaviest shards m has not handed
	// on: the most it can hand on in k moves.
	heaviestLeft := func(m, k int) float64 {
		sum := 0.0
		for _, x := range in.cands[m] {
			if k == 0 {
				break
			}
			if !moved[x] {
				sum += x.load
				k--
			}
		}
		return sum
	}
	nodes := 0
	var dfs func(d int)
	dfs = func(d int) {
		if nodes++; in.nodes > 0 && nodes > in.nodes {
			return // the search's bound: what it found so far
		}
		over := overs()
		if len(over) == 0 {
			score := 0.0
			for i := range n {
				if touched[i] > 0 {
					score = max(score, load[i]/in.capacity[i])
				}
			}
			if best == nil || score < bestScore-eps {
				best, bestScore = append([]fmove(nil), path...), score
			}
			return
		}
		if d == 0 || len(over) > d || len(path) == 0 && !slices.Contains(over, in.src) {
			return
		}
		// Each member above its limit hands on at least the fewest of its
		// shards left (the heaviest first, as it may) that cover its
		// excess.
		needed := 0
		for _, a := range over {
			k, sum := 0, 0.0
			for ci, x := range in.cands[a] {
				if ci <= lastFrom[a] || moved[x] {
					continue
				}
				if sum >= load[a]-limit[a]-eps {
					break
				}
				sum += x.load
				k++
			}
			if sum < load[a]-limit[a]-eps {
				return
			}
			if needed += k; needed > d {
				return
			}
		}
		for _, a := range over {
			if len(path) == 0 && a != in.src {
				continue
			}
			for ci, x := range in.cands[a] {
				if moved[x] || ci <= lastFrom[a] {
					continue
				}
				if d == 1 && load[a]-x.load > limit[a]+eps {
					break // lighter ones do not suffice either
				}
				// The receivers: those x fits, the most room first, and
				// those it takes above the band that can hand on enough
				// in turn, the heaviest shard first; fewestRecv of each.
				var fits, swaps []int
				for r := range n {
					if r == a || !in.recv[r] || load[r]/in.capacity[r] >= in.level-eps || !in.ok(x.name, in.names[r]) {
						continue
					}
					if over := load[r] + x.load - limit[r]; over <= eps {
						fits = append(fits, r)
					} else if d > 1 && over <= heaviestLeft(r, d-1)+eps {
						swaps = append(swaps, r)
					}
				}
				if len(fits) > fewestRecv {
					slices.SortStableFunc(fits, func(i, j int) int { return cmp.Compare(limit[j]-load[j], limit[i]-load[i]) })
					fits = fits[:fewestRecv]
				}
				if len(swaps) > fewestRecv {
					slices.SortStableFunc(swaps, func(i, j int) int { return cmp.Compare(heaviestLeft(j, d-1), heaviestLeft(i, d-1)) })
					swaps = swaps[:fewestRecv]
				}
				rs := append(fits, swaps...)
				slices.Sort(rs) // by name, as all of them are tried in a small group
				for _, r := range rs {
					prev := lastFrom[a]
					load[a] -= x.load
					load[r] += x.load
					moved[x], lastFrom[a] = true, ci
					touched[r]++
					path = append(path, fmove{s: x, from: a, to: r})
					dfs(d - 1)
					path = path[:len(path)-1]
					touched[r]--
					moved[x], lastFrom[a] = false, prev
					load[a] += x.load
					load[r] -= x.load
				}
			}
		}
	}
	depth := in.depth
	if depth == 0 {
		depth = fewestDepth
	}
	for d := max(1, in.from); d <= depth && best == nil; d++ {
		dfs(d)
	}
	return best
}
