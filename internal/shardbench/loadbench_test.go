package shardbench

// The load benchmark (issue 33): balancing by load side by side, in one
// run, on the same load process: Zipf(0.8) loads over K shards (scattered
// over the names by a seeded permutation), ±20 % noise redrawn every
// second, then one shard's load ×10. Four balancers:
//
//   - count only: azlease shards.Group whose work reports no load (the
//     count plan, what the package did before);
//   - by load: shards.Group whose work reports its load (SetLoad);
//   - offline greedy: the fewest moves a greedy that knows every load needs
//     from the same count-balanced start (computed, not run);
//   - central (Cadence style): internal/cadencebalance, a leader with an
//     exact view, 1.15/0.90 bands, 1 % of the shards per pass, 60 s
//     cooldown, its loads smoothed with a 60 s time constant (run as a
//     model: its moves take effect at once).
//
// The two azlease rows run on the public API in fake time on the emulator;
// they also give the requests per second by billing class, hence the cost.

import (
	"context"
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
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/cadencebalance"
	"github.com/azlease/azlease/internal/hostinfo"
	"github.com/azlease/azlease/shards"
)

// loadProc is the load of every shard: its base and this second's noise.
type loadProc struct {
	mu    sync.Mutex
	base  map[string]float64
	now   map[string]float64
	rng   *rand.Rand
	noise float64
}

func newLoadProc(names []string, seed uint64) *loadProc {
	rng := rand.New(rand.NewPCG(seed, 0x10ad))
	perm := rng.Perm(len(names))
	p := &loadProc{base: map[string]float64{}, now: map[string]float64{}, rng: rng, noise: 0.2}
	for i, s := range names {
		p.base[s] = 1 / math.Pow(float64(perm[i]+1), 0.8)
	}
	p.draw()
	return p
}

func (p *loadProc) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s, b := range p.base {
		p.now[s] = b * (1 + p.noise*(2*p.rng.Float64()-1))
	}
}

func (p *loadProc) rate(s string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now[s]
}

func (p *loadProc) baseOf(s string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.base[s]
}

func (p *loadProc) jump(s string, f float64) {
	p.mu.Lock()
	p.base[s] *= f
	p.mu.Unlock()
	p.draw()
}

// maxOverMean is the largest replica's base load over the mean, for an
// assignment shard → replica over n replicas of equal capacity.
func maxOverMean(p *loadProc, own map[string]string, n int) float64 {
	per := map[string]float64{}
	total := 0.0
	for s, r := range own {
		v := p.baseOf(s)
		per[r] += v
		total += v
	}
	worst := 0.0
	for _, v := range per {
		worst = max(worst, v)
	}
	return worst / (total / float64(n))
}

// inBand reports whether an assignment is within 1.10 of the mean, a shard
// heavier than a replica's share alone on its replica (and the others
// within 1.10 of their mean).
func inBand(p *loadProc, own map[string]string, members []string) bool {
	per, count, total, heaviest := baseTotals(p, own)
	n := float64(len(members))
	if h := p.baseOf(heaviest); h > total/n {
		host := own[heaviest]
		if count[host] != 1 {
			return false
		}
		total -= h
		n--
		delete(per, host)
	}
	for _, v := range per {
		if v > 1.10*total/n+1e-9 {
			return false
		}
	}
	return true
}

// loadResult is one balancer's figures in one run.
type loadResult struct {
	startRatio   float64 // count-balanced max/mean
	converged    time.Duration
	convMoves    int
	steady       []float64 // max/mean samples in the steady state
	steadyMoves  int
	backForth    int
	jumpBack     time.Duration // -1: not within the run
	jumpMoves    int
	jumpHot      bool          // the jump made the shard heavier than a replica's share (it must then be alone: its replica's other shards all go)
	addOwned     time.Duration // an added shard: from AddShards to its work running
	perSecond    map[string]float64
	stableWindow time.Duration
}

// byClass maps an operation to Azure's billing class.
func byClass(op string) string {
	switch op {
	case "list":
		return "list (as writes)"
	case "put blob":
		return "write"
	case "get blob":
		return "read"
	case "delete blob":
		return "free"
	}
	return "other" // lease operations, Get Blob Properties, Set Blob Metadata
}

// memberReads counts the reads of memberships' properties (billed as
// "other", and counted there too): the zone probes, and a hand-off's read
// of its receiver's membership. Priced at 0 so as not to count twice.
const memberReads = "member reads"

// classCounter counts every replica's requests by billing class.
type classCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *classCounter) fault(r azleasetest.Request) azleasetest.Fault {
	op := ""
	switch r.Op {
	case azleasetest.OpListBlobs:
		op = "list"
	case azleasetest.OpPutBlob:
		op = "put blob"
	case azleasetest.OpGetBlob:
		op = "get blob"
	case azleasetest.OpDeleteBlob:
		op = "delete blob"
	}
	if r.Client != "observer" {
		c.mu.Lock()
		c.n[byClass(op)]++
		if r.Op == azleasetest.OpGetProperties && strings.HasPrefix(r.Blob, "g/members/") {
			c.n[memberReads]++ // counted in "other" too
		}
		c.mu.Unlock()
	}
	return azleasetest.Fault{}
}

func (c *classCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// loadPhases are a run's lengths: the count-balanced start, convergence,
// the steady state, after the jump.
type loadPhases struct{ start, converge, steady, jump time.Duration }

// runAzleaseLoad runs N replicas of shards.Group on K shards; report says
// whether their work reports its load; zones, when not 0, puts replica i
// in zone i mod zones (Options.Zone).
func runAzleaseLoad(t *testing.T, k, n int, seed uint64, report bool, ph loadPhases, zones int) loadResult {
	var res loadResult
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(k)
		lp := newLoadProc(names, seed)
		cc := &classCounter{n: map[string]int{}}
		var members []string
		for i := range n {
			members = append(members, fmt.Sprintf("r%d", i))
		}
		var tr *jumpTrace
		if report {
			tr = newJumpTrace(members)
		}
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			tr.request(r)
			return cc.fault(r)
		})
		var mu sync.Mutex
		own := map[string]string{}         // shard → the replica whose work runs it
		started := map[string]time.Time{}  // shard → when its current run began
		var moves []modelMove              // runs that began at another replica
		lastOwner := map[string][]string{} // shard → replicas it ran on, in order
		reporting := false
		work := func(id string) shards.Work {
			return func(ctx context.Context, s *shards.Shard) error {
				mu.Lock()
				if prev := own[s.Name]; prev != id {
					moves = append(moves, modelMove{at: time.Now(), shard: s.Name, from: prev, to: id})
					lastOwner[s.Name] = append(lastOwner[s.Name], id)
				}
				own[s.Name] = id
				started[s.Name] = time.Now()
				mu.Unlock()
				for {
					mu.Lock()
					on := reporting
					mu.Unlock()
					if on {
						s.SetLoad(lp.rate(s.Name))
					}
					select {
					case <-ctx.Done():
						return nil // its load counts here until it runs elsewhere
					case <-time.After(time.Second):
					}
				}
			}
		}
		var groups []*shards.Group
		for i := range n {
			id := members[i]
			zone := ""
			if zones > 0 {
				zone = fmt.Sprintf("zone-%d", i%zones)
			}
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, Zone: zone, Logger: tr.logger(id)})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), work(id)))
			groups = append(groups, g)
		}
		snapshot := func() map[string]string {
			mu.Lock()
			defer mu.Unlock()
			out := make(map[string]string, len(own))
			for s, r := range own {
				out[s] = r
			}
			return out
		}
		ticker := func(d time.Duration, each func()) {
			for end := time.Now().Add(d); time.Now().Before(end); {
				time.Sleep(time.Second)
				lp.draw()
				if each != nil {
					each()
				}
			}
		}
		ticker(ph.start, nil) // count-balanced
		res.startRatio = maxOverMean(lp, snapshot(), n)
		mu.Lock()
		reporting = report
		before := len(moves)
		mu.Unlock()
		t0 := time.Now()
		res.converged = -1
		ticker(ph.converge, func() {
			if res.converged < 0 && inBand(lp, snapshot(), members) {
				res.converged = time.Since(t0)
				mu.Lock()
				res.convMoves = len(moves) - before
				mu.Unlock()
			}
		})
		mu.Lock()
		before = len(moves)
		mu.Unlock()
		c0 := cc.snapshot()
		s0 := time.Now()
		observe := func() (shards.Assignment, error) {
			return shards.Inspect(context.Background(), srv.Client("observer"), "g", names)
		}
		traced := len(moves)
		traceSecond := func(in bool) {
			if tr == nil {
				return
			}
			mu.Lock()
			ms := slices.Clone(moves[traced:])
			traced = len(moves)
			mu.Unlock()
			tr.second(context.Background(), lp, snapshot(), in, ms, observe)
		}
		tr.start(s0.Add(ph.steady))
		ticker(ph.steady, func() {
			res.steady = append(res.steady, maxOverMean(lp, snapshot(), n))
			if time.Until(s0.Add(ph.steady)) < 10*time.Second {
				traceSecond(inBand(lp, snapshot(), members))
			} else {
				mu.Lock()
				traced = len(moves)
				mu.Unlock()
			}
		})
		res.stableWindow = time.Since(s0)
		c1 := cc.snapshot()
		res.perSecond = map[string]float64{}
		for k, v := range c1 {
			res.perSecond[k] = float64(v-c0[k]) / res.stableWindow.Seconds()
		}
		mu.Lock()
		steady := slices.Clone(moves[before:])
		mu.Unlock()
		res.steadyMoves, res.backForth = len(steady), backAndForthMoves(steady, 10*time.Minute)

		// One shard ×10.
		jumped := names[lp.rng.IntN(len(names))]
		jumpedFrom := snapshot()[jumped]
		lp.jump(jumped, 10)
		total := 0.0
		for _, s := range names {
			total += lp.baseOf(s)
		}
		res.jumpHot = lp.baseOf(jumped) > total/float64(len(members))
		mu.Lock()
		before = len(moves)
		mu.Unlock()
		j0 := time.Now()
		var in []bool
		var movesAt []int
		ticker(ph.jump, func() {
			in = append(in, inBand(lp, snapshot(), members))
			mu.Lock()
			movesAt = append(movesAt, len(moves)-before)
			mu.Unlock()
			traceSecond(in[len(in)-1])
		})
		res.jumpBack = -1
		for i := range in {
			ok := i+30 <= len(in)
			for j := i; ok && j < i+30; j++ {
				ok = in[j]
			}
			if ok {
				res.jumpBack, res.jumpMoves = time.Duration(i+1)*time.Second, movesAt[i]
				break
			}
		}
		_ = j0
		if err := tr.write(fmt.Sprintf("load-%d", seed), fmt.Sprintf("seed %d: shard %s (base %.4f after the jump) on %s jumped ×10 at t=0; back in band after %v, %d moves",
			seed, jumped, lp.baseOf(jumped), jumpedFrom, res.jumpBack, res.jumpMoves)); err != nil {
			t.Error(err)
		}

		// An added shard.
		added := time.Now()
		require.NoError(t, shards.AddShards(context.Background(), srv.Client("observer"), "g", "added"))
		for time.Since(added) < time.Minute {
			mu.Lock()
			_, ok := own["added"]
			at := started["added"]
			mu.Unlock()
			if ok {
				res.addOwned = at.Sub(added)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
	})
	return res
}

// modelMove is a shard beginning to run at another replica.
type modelMove struct {
	at              time.Time
	shard, from, to string
}

// backAndForthMoves counts moves of a shard back to a replica it left
// within window.
func backAndForthMoves(moves []modelMove, window time.Duration) int {
	n := 0
	for i, a := range moves {
		if a.from == "" {
			continue
		}
		for _, b := range moves[i+1:] {
			if b.shard == a.shard && b.to == a.from && b.at.Sub(a.at) <= window {
				n++
				break
			}
		}
	}
	return n
}

// runCadence plays the central reference model on the same load process,
// from the same count-balanced start (the count plan: contiguous ranges).
func runCadence(k, n int, seed uint64, ph loadPhases) loadResult {
	var res loadResult
	names := shards.Numbered(k)
	lp := newLoadProc(names, seed)
	l := cadencebalance.New(cadencebalance.Defaults)
	var members []string
	for i := range n {
		members = append(members, fmt.Sprintf("r%d", i))
	}
	for i, s := range names {
		l.Assign(s, members[min(n-1, i*n/k)])
	}
	own := func() map[string]string {
		out := map[string]string{}
		for _, s := range names {
			out[s] = l.Owner(s)
		}
		return out
	}
	res.startRatio = maxOverMean(lp, own(), n)
	now := time.Unix(1_700_000_000, 0)
	smooth := map[string]float64{}
	for _, s := range names {
		smooth[s] = lp.baseOf(s)
	}
	var moves []modelMove
	step := func(sample func()) {
		now = now.Add(time.Second)
		lp.draw()
		a := 1 - math.Exp(-1.0/60) // a 60 s time constant
		for _, s := range names {
			smooth[s] += a * (lp.rate(s) - smooth[s])
		}
		if now.Unix()%2 == 0 {
			for _, m := range l.Pass(now, members, names, smooth) {
				moves = append(moves, modelMove{at: now, shard: m.Shard, from: m.From, to: m.To})
			}
		}
		if sample != nil {
			sample()
		}
	}
	res.converged = -1
	for i := 0; i < int(ph.converge/time.Second); i++ {
		step(func() {
			if res.converged < 0 && inBand(lp, own(), members) {
				res.converged, res.convMoves = time.Duration(i+1)*time.Second, len(moves)
			}
		})
	}
	before := len(moves)
	for range int(ph.steady / time.Second) {
		step(func() { res.steady = append(res.steady, maxOverMean(lp, own(), n)) })
	}
	res.steadyMoves, res.backForth = len(moves)-before, backAndForthMoves(moves[before:], 10*time.Minute)
	jumped := names[lp.rng.IntN(len(names))]
	lp.jump(jumped, 10)
	before = len(moves)
	var in []bool
	var movesAt []int
	for range int(ph.jump / time.Second) {
		step(func() {
			in = append(in, inBand(lp, own(), members))
			movesAt = append(movesAt, len(moves)-before)
		})
	}
	res.jumpBack = -1
	for i := range in {
		ok := i+30 <= len(in)
		for j := i; ok && j < i+30; j++ {
			ok = in[j]
		}
		if ok {
			res.jumpBack, res.jumpMoves = time.Duration(i+1)*time.Second, movesAt[i]
			break
		}
	}
	res.addOwned = 2 * time.Second // placed at the next pass (a pass every 2 s), at best
	return res
}

// greedyMoves is the offline greedy's moves from the count plan's start
// (contiguous ranges) to max/mean ≤ 1.10, every load known exactly: each
// move the shard that most lowers the larger of the most loaded replica's
// and the receiver's loads.
func greedyMoves(k, n int, seed uint64) (int, float64) {
	names := shards.Numbered(k)
	lp := newLoadProc(names, seed)
	own := map[string]string{}
	per := make([]float64, n)
	for i, s := range names {
		r := min(n-1, i*n/k)
		own[s] = strconv.Itoa(r)
		per[r] += lp.baseOf(s)
	}
	total := 0.0
	for _, v := range per {
		total += v
	}
	mean := total / float64(n)
	moves := 0
	for range 2 * k {
		src := 0
		for i := range per {
			if per[i] > per[src] {
				src = i
			}
		}
		if per[src] <= 1.10*mean {
			break
		}
		bestS, bestTo, bestF := "", -1, per[src]
		for _, s := range names {
			if own[s] != strconv.Itoa(src) {
				continue
			}
			for to := range per {
				if to == src {
					continue
				}
				if f := max(per[src]-lp.baseOf(s), per[to]+lp.baseOf(s)); f < bestF-1e-12 {
					bestS, bestTo, bestF = s, to, f
				}
			}
		}
		if bestS == "" {
			break
		}
		per[src] -= lp.baseOf(bestS)
		per[bestTo] += lp.baseOf(bestS)
		own[bestS] = strconv.Itoa(bestTo)
		moves++
	}
	worst := slices.Max(per)
	return moves, worst / mean
}

// costRun is one row of the cost table: N = 8 replicas reporting loads on
// k shards, the defaults but for zones (see runAzleaseLoad), a 10-minute
// steady state.
func costRun(t *testing.T, k, zones int) loadResult {
	var r loadResult
	name := fmt.Sprintf("cost/K%d", k)
	if zones > 0 {
		name += fmt.Sprintf("zones%d", zones)
	}
	t.Run(name, func(t *testing.T) {
		r = runAzleaseLoad(t, k, 8, 0, true, loadPhases{start: 30 * time.Second, converge: 3 * time.Minute, steady: 10 * time.Minute, jump: 30 * time.Second}, zones)
	})
	return r
}

// Prices at Azure's list prices, hot tier, LRS, GPv2 (the sample prices
// of Microsoft's cost-estimate article, which match the US list prices):
// per 10,000 requests.
var prices = map[string]float64{"list (as writes)": 0.055, "write": 0.055, "read": 0.0044, "other": 0.0044, "free": 0, memberReads: 0}

// perMonth is the $/month of rates (requests/s by class).
func perMonth(rates map[string]float64) float64 {
	usd := 0.0
	for class, r := range rates {
		usd += r * 30 * 24 * 3600 / 10_000 * prices[class]
	}
	return usd
}

// TestLoadBench runs the load benchmark. Without AZLEASE_LOADBENCH_REPORT
// it is a smoke test (K=32, N=4, one seed, short phases: that every row
// produces figures); with it, AZLEASE_LOADBENCH_SEEDS seeds (default 3) of
// K=256, N=8, and the cost table for K=32, 256 and 1,000 (N=8), written
// to the report. AZLEASE_LOADBENCH_ROWS=load runs only the by-load rows
// (no count-only row, no cost table), and AZLEASE_LOADBENCH_FIRST=S
// starts at seed S (to look at the ×10 jump over many seeds; see also
// AZLEASE_LOADBENCH_TRACE in jumptrace_test.go).
func TestLoadBench(t *testing.T) {
	report := os.Getenv("AZLEASE_LOADBENCH_REPORT")
	full := report != ""
	k, n, seeds := 32, 4, 1
	ph := loadPhases{start: 30 * time.Second, converge: 2 * time.Minute, steady: 2 * time.Minute, jump: 2 * time.Minute}
	if full {
		k, n, seeds = 256, 8, 3
		if s, err := strconv.Atoi(os.Getenv("AZLEASE_LOADBENCH_SEEDS")); err == nil && s > 0 {
			seeds = s
		}
		ph = loadPhases{start: 30 * time.Second, converge: 5 * time.Minute, steady: 10 * time.Minute, jump: 3 * time.Minute}
	}
	loadOnly := os.Getenv("AZLEASE_LOADBENCH_ROWS") == "load"
	first, _ := strconv.ParseUint(os.Getenv("AZLEASE_LOADBENCH_FIRST"), 10, 64)
	began := time.Now()
	rows := map[string][]loadResult{}
	var greedy []int
	var greedyFinal []float64
	for seed := first; seed < first+uint64(seeds); seed++ {
		if !loadOnly {
			t.Run(fmt.Sprintf("count/%d", seed), func(t *testing.T) {
				rows["count only"] = append(rows["count only"], runAzleaseLoad(t, k, n, seed, false, ph, 0))
			})
		}
		t.Run(fmt.Sprintf("load/%d", seed), func(t *testing.T) {
			rows["by load"] = append(rows["by load"], runAzleaseLoad(t, k, n, seed, true, ph, 0))
		})
		rows["central (Cadence style)"] = append(rows["central (Cadence style)"], runCadence(k, n, seed, ph))
		m, f := greedyMoves(k, n, seed)
		greedy, greedyFinal = append(greedy, m), append(greedyFinal, f)
		if rs := rows["by load"]; len(rs) > 0 && m > 0 {
			r := rs[len(rs)-1]
			t.Logf("seed %d: by load converged in %d moves, the offline greedy %d: ×%.2f; ×10 jump back in %v, %d moves",
				seed, r.convMoves, m, float64(r.convMoves)/float64(m), r.jumpBack, r.jumpMoves)
		}
	}
	for name, rs := range rows {
		for _, r := range rs {
			if len(r.steady) == 0 {
				t.Errorf("%s: no steady samples", name)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Zipf(0.8) loads over K = %d shards (scattered over the names by a seeded permutation), N = %d replicas of equal\n", k, n)
	fmt.Fprintf(&b, "capacity, ±20 %% noise redrawn every second; %d seeds, every row in this one run (%v of real time on %s, %d logical CPUs,\n",
		seeds, time.Since(began).Round(time.Second), hostinfo.CPUModel(), runtime.NumCPU())
	fmt.Fprintf(&b, "%s/%s, %s). The azlease rows run shards.Group on the public API in fake time on the emulator (defaults: poll 2 s,\n", runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(&b, "listing 15 s, leases 60 s); they start count-balanced (no load reported for %v), then report loads (count only: never).\n", ph.start)
	fmt.Fprintf(&b, "The central model (internal/cadencebalance: a leader, bands 1.15/0.90, 1 %% of the shards per pass every 2 s, 60 s\n")
	fmt.Fprintf(&b, "cooldown, loads smoothed with a 60 s time constant) starts from the same count-balanced assignment; its moves take effect\n")
	fmt.Fprintf(&b, "at once. The offline greedy knows every load and moves the shard that most lowers the larger of the pair, to ≤ 1.10.\n")
	fmt.Fprintf(&b, "max/mean is the busiest replica's base load over the mean; in band: ≤ 1.10, a shard heavier than a replica's share\n")
	fmt.Fprintf(&b, "alone on its replica; back in band: from the ×10 jump of a random shard's load to the first second from which the group\n")
	fmt.Fprintf(&b, "stays in band 30 s.\n\n")
	fmt.Fprintf(&b, "| balancer | count-balanced max/mean p50 | converged (moves) p50 | steady max/mean p50 / p99 | steady moves / back and forth per 10 min | ×10 jump: back in band p50 / max (moves p50 / max) | added shard owned after |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range []string{"count only", "by load", "central (Cadence style)"} {
		rs := rows[name]
		if len(rs) == 0 {
			continue
		}
		var starts, steady []float64
		var conv, jumps, adds []time.Duration
		var cm, jm []int
		sm, bf := 0.0, 0
		for _, r := range rs {
			starts = append(starts, r.startRatio)
			steady = append(steady, r.steady...)
			conv, cm = append(conv, r.converged), append(cm, r.convMoves)
			jumps, jm = append(jumps, r.jumpBack), append(jm, r.jumpMoves)
			adds = append(adds, r.addOwned)
			sm += float64(r.steadyMoves) * float64(10*time.Minute) / float64(ph.steady)
			bf += r.backForth
		}
		dur := func(d time.Duration) string {
			if d < 0 {
				return "never"
			}
			return d.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %.2f | %s (%d) | %.3f / %.3f | %.1f / %d | %s / %s (%d / %d) | %s |\n", name,
			quantile(starts, 0.5), dur(quantile(conv, 0.5)), quantile(cm, 0.5), quantile(steady, 0.5), quantile(steady, 0.99),
			sm/float64(len(rs)), bf, dur(quantile(jumps, 0.5)), dur(slices.Max(jumps)), quantile(jm, 0.5), slices.Max(jm), dur(quantile(adds, 0.5)))
	}
	fmt.Fprintf(&b, "| offline greedy | | (%d) to %.3f | | | | |\n\n", quantile(greedy, 0.5), quantile(greedyFinal, 0.5))
	if rs := rows["by load"]; len(rs) > 0 && slices.ContainsFunc(rs, func(r loadResult) bool { return !r.jumpHot }) {
		var all, within []int
		for _, r := range rs {
			all = append(all, r.jumpMoves)
			if !r.jumpHot {
				within = append(within, r.jumpMoves)
			}
		}
		fmt.Fprintf(&b, "By load, the ×10 jump's moves until back in band: p90 %d over the %d jumps that leave the shard within a replica's share\n", quantile(within, 0.9), len(within))
		fmt.Fprintf(&b, "(p50 %d, max %d); over all %d, p90 %d (a jump that makes the shard hot sends its replica's other shards away).\n\n",
			quantile(within, 0.5), slices.Max(within), len(all), quantile(all, 0.9))
	}
	t.Log("\n" + b.String())
	if !full {
		return
	}
	if loadOnly {
		var jumps []string
		for i, r := range rows["by load"] {
			hot := ""
			if r.jumpHot {
				hot = ",hot"
			}
			jumps = append(jumps, fmt.Sprintf("%d:%v/%d%s", first+uint64(i), r.jumpBack, r.jumpMoves, hot))
		}
		fmt.Fprintf(&b, "×10 jump back in band by seed (seed:time/moves): %s\n", strings.Join(jumps, " "))
		if err := os.WriteFile(report, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	// Cost: requests per second by billing class in the steady state, with
	// the defaults, and $/month at the hot tier's list prices.
	fmt.Fprintf(&b, "Cost with the defaults (poll 2 s, listing 15 s, leases 60 s), N = 8 replicas reporting loads, from the requests of a\n")
	fmt.Fprintf(&b, "10-minute steady state in fake time; prices per 10,000 requests, hot tier, LRS, GPv2 (Microsoft's sample prices, which\n")
	fmt.Fprintf(&b, "match the US list prices; check your region): writes and List Blobs $0.055, reads and other operations (leases, Get\n")
	fmt.Fprintf(&b, "Blob Properties, Set Blob Metadata) $0.0044; a month is 30 days. The last row puts the replicas in 3 zones\n")
	fmt.Fprintf(&b, "(Options.Zone): each zone's prober reads one of its memberships each poll that does not list (Get Blob Properties,\n")
	fmt.Fprintf(&b, "\"other\"); \"member reads/s\" counts the reads of memberships' properties (the probes, and a hand-off's read of its\n")
	fmt.Fprintf(&b, "receiver's).\n\n")
	fmt.Fprintf(&b, "| K | list/s | write/s | read/s | other/s | member reads/s | $/month |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range []struct{ k, zones int }{{32, 0}, {256, 0}, {1000, 0}, {256, 3}} {
		r := costRun(t, row.k, row.zones)
		label := strconv.Itoa(row.k)
		if row.zones > 0 {
			label += fmt.Sprintf(", %d zones", row.zones)
		}
		ps := r.perSecond
		fmt.Fprintf(&b, "| %s | %.2f | %.3f | %.3f | %.2f | %.3f | %.2f |\n", label, ps["list (as writes)"], ps["write"], ps["read"], ps["other"],
			ps[memberReads], perMonth(ps))
	}
	if err := os.WriteFile(report, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// baseTotals is each replica's base load and shard count under own, the
// group's total, and its heaviest shard.
func baseTotals(p *loadProc, own map[string]string) (per map[string]float64, count map[string]int, total float64, heaviest string) {
	per, count = map[string]float64{}, map[string]int{}
	for s, r := range own {
		v := p.baseOf(s)
		per[r] += v
		count[r]++
		total += v
		if heaviest == "" || v > p.baseOf(heaviest) {
			heaviest = s
		}
	}
	return per, count, total, heaviest
}
