package cadencebalance

// The leader's pass: placement of unassigned shards, then band-and-budget
// moves by load.

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Config is the distributor's greedy mode's configuration.
type Config struct {
	UpperBand, LowerBand float64       // 1.15, 0.90
	SevereImbalance      float64       // 1.3
	MoveBudget           float64       // 0.01: the fraction of shards a pass may move
	Cooldown             time.Duration // 60 s
	Period               time.Duration // 2 s
}

// Defaults is the distributor's defaults.
var Defaults = Config{UpperBand: 1.15, LowerBand: 0.90, SevereImbalance: 1.3, MoveBudget: 0.01, Cooldown: time.Minute, Period: 2 * time.Second}

// Move is one reassignment a pass makes.
type Move struct {
	Shard, From, To string // From "" for a placement
}

// Leader is the distributor's leader: where every shard is, and when each
// last moved.
type Leader struct {
	cfg   Config
	owner map[string]string
	moved map[string]time.Time
}

// New returns a leader with cfg.
func New(cfg Config) *Leader {
	return &Leader{cfg: cfg, owner: map[string]string{}, moved: map[string]time.Time{}}
}

// Owner is where a shard is ("" when unassigned).
func (l *Leader) Owner(shard string) string { return l.owner[shard] }

// Assign places a shard by hand (a starting assignment).
func (l *Leader) Assign(shard, executor string) { l.owner[shard] = executor }

// Pass is one pass at now, for the executors (their names) and the
// shards' smoothed loads (a shard absent from loads has not reported: it
// counts as the mean). It returns the moves it made, placements first.
func (l *Leader) Pass(now time.Time, executors []string, shards []string, loads map[string]float64) []Move {
	execs := slices.Clone(executors)
	slices.Sort(execs)
	live := map[string]bool{}
	for _, e := range execs {
		live[e] = true
	}
	known, sum := 0, 0.0
	for _, s := range shards {
		if v, ok := loads[s]; ok {
			known++
			sum += v
		}
	}
	mean := 1.0
	if known > 0 {
		mean = sum / float64(known)
	}
	load := func(s string) float64 {
		if v, ok := loads[s]; ok {
			return v
		}
		return mean
	}
	per := map[string]float64{}
	for _, e := range execs {
		per[e] = 0
	}
	var free []string
	for _, s := range shards {
		if o := l.owner[s]; live[o] {
			per[o] += load(s)
		} else {
			free = append(free, s)
		}
	}
	var moves []Move
	least := func(but string) string {
		best := ""
		for _, e := range execs {
			if e != but && (best == "" || per[e] < per[best]) {
				best = e
			}
		}
		return best
	}
	if len(execs) == 0 {
		return nil
	}
	for _, s := range free {
		to := least("")
		moves = append(moves, Move{Shard: s, To: to})
		l.owner[s] = to
		per[to] += load(s)
	}
	budget := max(1, int(math.Floor(l.cfg.MoveBudget*float64(len(shards)))))
	total := 0.0
	for _, v := range per {
		total += v
	}
	avg := total / float64(len(execs))
	if avg <= 0 {
		return moves
	}
	for budget > 0 {
		src := ""
		for _, e := range execs {
			if src == "" || per[e] > per[src] {
				src = e
			}
		}
		severe := per[src]/avg >= l.cfg.SevereImbalance
		if per[src] <= l.cfg.UpperBand*avg {
			break
		}
		dst := ""
		for _, e := range execs {
			below := per[e] < l.cfg.LowerBand*avg || severe && per[e] < avg
			if e != src && below && (dst == "" || per[e] < per[dst]) {
				dst = e
			}
		}
		if dst == "" {
			break
		}
		gap := per[src] - per[dst]
		var cand []string
		for _, s := range shards {
			if l.owner[s] == src && load(s) < gap && now.Sub(l.moved[s]) >= l.cfg.Cooldown {
				cand = append(cand, s)
			}
		}
		if len(cand) == 0 {
			break
		}
		best := slices.MinFunc(cand, func(a, b string) int {
			if c := cmp.Compare(math.Abs(load(a)-gap/2), math.Abs(load(b)-gap/2)); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		moves = append(moves, Move{Shard: best, From: src, To: dst})
		l.owner[best], l.moved[best] = dst, now
		per[src] -= load(best)
		per[dst] += load(best)
		budget--
	}
	return moves
}
