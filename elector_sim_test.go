package azlease_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/simfault"
)

var seedsFlag = flag.Int("seeds", 0, "random scenarios for the safety simulation (default: $AZLEASE_SEEDS, else 100)")

// simSeeds is how many random seeds the safety simulation runs: -seeds, or
// AZLEASE_SEEDS (make test sets 200), else 100; -short runs 20.
//
//	go test -run TestElectorSafetySimulation . -seeds 5000
func simSeeds() int {
	if *seedsFlag > 0 {
		return *seedsFlag
	}
	if n, err := strconv.Atoi(os.Getenv("AZLEASE_SEEDS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 20
	}
	return 100
}

// partSeeds is a simulation's share of simSeeds: -seeds as given, else
// simSeeds()/div, at least least.
func partSeeds(div, least int) int {
	if *seedsFlag > 0 {
		return *seedsFlag
	}
	return max(simSeeds()/div, least)
}

// simulation is the seed loop every simulation shares: one subtest per seed
// 0..seeds−1, its scenario played in a synctest bubble.
type simulation[S, R any] struct {
	seeds    int
	scenario func(seed uint64) S
	// play plays sc inside the seed's bubble and returns what the checker
	// found.
	play func(t *testing.T, sc S) R
	// check asserts on it, in the seed's subtest after the bubble ended
	// (nil: play asserts).
	check func(t *testing.T, sc S, r R)
	// add adds a seed's result to the run's totals, failed or not.
	add func(sc S, r R)
	// rerun is the -seeds that reruns seed alone (nil: seed + 1, for the
	// simulations whose seed count is -seeds itself).
	rerun func(seed uint64) uint64
	// serial runs the seeds one at a time (a simulation whose play uses
	// package-level state, such as a test hook, shared between seeds).
	serial bool
}

// run runs every seed, as many at once as GOMAXPROCS (seeds are
// independent worlds, each in its own bubble), unless serial; a seed that
// fails logs how to rerun it. Subtests keep their names (the seed), so a
// rerun line selects one as before.
func (s simulation[S, R]) run(t *testing.T) {
	workers := 1
	if !s.serial {
		workers = max(1, runtime.GOMAXPROCS(0))
	}
	var (
		mu  sync.Mutex // serialises add
		wg  sync.WaitGroup
		sem = make(chan struct{}, workers)
	)
	for seed := range uint64(s.seeds) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sc := s.scenario(seed)
			var r R
			ok := t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { r = s.play(t, sc) })
				if s.check != nil {
					s.check(t, sc, r)
				}
			})
			if !ok {
				rerun := seed + 1
				if s.rerun != nil {
					rerun = s.rerun(seed)
				}
				t.Logf("reproduce with: go test -run '%s/^%d$' -seeds %d -count 50 . (%v); a rerun fails only sometimes, see DEVELOPERS.md", t.Name(), seed, rerun, sc)
			}
			mu.Lock()
			s.add(sc, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// scenario is one seed's world: how many nodes, how the network and the
// server misbehave, and what happens to the nodes, over ten minutes.
type scenario struct {
	seed      uint64
	nodes     int
	faultRate float64 // share of requests that meet a transient fault
	clockRate float64 // the server's clock speed relative to the clients'
	opts      azlease.ElectorOptions
	events    []event
	length    time.Duration
	chaos     bool // partitions, outages, pauses and stops; otherwise transient faults only
	// badStart and badLen place the seed's bad period, if badLen > 0: from
	// badStart on, acquire answers are lost and releases are applied late.
	badStart, badLen time.Duration
	// work makes leaders write, set metadata and read through their term
	// (off in the comparison with the naive loop, which does no work, so
	// that request counts compare).
	work bool
	// priorities, when set, are the nodes' ElectorOptions.Priority (a
	// third of the chaos seeds), so that leaders yield to preferred
	// candidates amid the faults.
	priorities []int
}

type event struct {
	at   time.Duration
	kind string // stop, crash, outage, pause, break, yield
	node int
	dur  time.Duration
}

func newScenario(seed uint64, chaos bool) scenario {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	sc := scenario{
		seed:      seed,
		nodes:     2 + rng.IntN(4),
		faultRate: rng.Float64() * 0.3,
		clockRate: []float64{1, 1, 1.01, 0.99, 1.04}[rng.IntN(5)],
		length:    10 * time.Minute,
		chaos:     chaos,
	}
	sc.opts.LeaseDuration = time.Duration([]int{15, 15, 20, 30}[rng.IntN(4)]) * time.Second
	sc.opts.PollInterval = time.Duration([]int{1, 2, 5}[rng.IntN(3)]) * time.Second
	if rng.IntN(4) == 0 {
		sc.opts.TakeoverDelay = 5 * time.Second
	}
	if !chaos {
		sc.faultRate = 0.2
		sc.clockRate = 1
		return sc
	}
	for at := 30 * time.Second; at < sc.length-time.Minute; at += time.Duration(20+rng.IntN(40)) * time.Second {
		kind := []string{"stop", "crash", "crash", "outage", "pause"}[rng.IntN(5)]
		d := time.Duration(1+rng.IntN(40)) * time.Second
		sc.events = append(sc.events, event{at: at, kind: kind, node: rng.IntN(sc.nodes), dur: d})
	}
	sc.events, sc.badStart, sc.badLen = addOperatorTrouble(rng, sc.events, sc.length, sc.opts.LeaseDuration)
	addSuccession(&sc)
	return sc
}

// addSuccession adds, from a source of its own (so that the rest of a
// seed's scenario stays what it was before succession), priorities to a
// third of the chaos seeds (with a short StabilityWindow and Cooldown, so
// that leaders yield within the ten minutes) and yields, by whoever leads,
// to half of them.
func addSuccession(sc *scenario) {
	rng := rand.New(rand.NewPCG(sc.seed, 0x5ecc))
	if rng.IntN(3) == 0 {
		sc.priorities = make([]int, sc.nodes)
		for i := range sc.priorities {
			sc.priorities[i] = rng.IntN(4) - 1
		}
		sc.opts.StabilityWindow = time.Duration(5+rng.IntN(26)) * time.Second
		sc.opts.Cooldown = time.Duration(10+rng.IntN(51)) * time.Second
	}
	if rng.IntN(2) == 0 {
		for range 1 + rng.IntN(4) {
			at := time.Duration(30+rng.IntN(int(sc.length/time.Second)-90)) * time.Second
			sc.events = append(sc.events, event{at: at, kind: "yield"})
		}
		sortEvents(sc.events)
	}
}

// sortEvents orders events by time, keeping the order of simultaneous ones.
func sortEvents(evs []event) {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
}

func (sc scenario) String() string {
	bad := "none"
	if sc.badLen > 0 {
		bad = fmt.Sprintf("%v+%v", sc.badStart, sc.badLen)
	}
	prio := "none"
	if sc.priorities != nil {
		prio = fmt.Sprintf("%v (window %v, cooldown %v)", sc.priorities, sc.opts.StabilityWindow, sc.opts.Cooldown)
	}
	return fmt.Sprintf("seed %d: %d nodes, faults %.0f%%, server clock ×%.2f, lease %v, poll %v, takeover delay %v, %d events, bad period %s, priorities %s",
		sc.seed, sc.nodes, sc.faultRate*100, sc.clockRate, sc.opts.LeaseDuration, sc.opts.PollInterval, sc.opts.TakeoverDelay, len(sc.events), bad, prio)
}

// addOperatorTrouble adds, in half the scenarios, an operator breaking the
// lease (whoever holds it) once to three times, with a break period from one
// lease duration to 60 s, and picks, in a third, a bad period (its start and
// length; zero for none) of lost acquire answers and late releases.
func addOperatorTrouble(rng *rand.Rand, events []event, length, lease time.Duration) (_ []event, badStart, badLen time.Duration) {
	if rng.IntN(2) == 0 {
		for range 1 + rng.IntN(3) {
			at := time.Duration(30+rng.IntN(int(length/time.Second)-90)) * time.Second
			d := lease + time.Duration(rng.IntN(int((60*time.Second-lease)/time.Second)+1))*time.Second
			events = append(events, event{at: at, kind: "break", dur: d})
		}
		sortEvents(events)
	}
	if rng.IntN(3) == 0 {
		badStart = time.Duration(30+rng.IntN(int(length/time.Second)-240)) * time.Second
		badLen = time.Duration(30+rng.IntN(90)) * time.Second
	}
	return events, badStart, badLen
}

// transientFault draws the fault for one request from rng, the random
// source of the request's client and operation (faultMix.source): the
// mix of internal/simfault, which the shards simulation draws from too.
func transientFault(rng *rand.Rand, rate float64, lateMax time.Duration) azleasetest.Fault {
	return simfault.Transient(rng, rate, lateMax)
}

// faultMix draws the per-request faults of one scenario, counts the requests
// it delays past their sender's patience (ApplyLate) by operation, and, with
// AZLEASE_DEBUG_SIM set, keeps a log of every fault it injected.
//
// Each client's operation has a random source of its own, derived from the
// seed and the client's name and operation, so the fault drawn for a node's
// k-th renewal (say) is the same however the other nodes' requests, and this
// node's other operations, interleave with it. A single shared source would
// hand out its values in the order requests arrive, which goroutine
// scheduling can change from run to run.
type faultMix struct {
	mu       sync.Mutex
	sources  *simfault.Sources // by client and operation
	rate     float64
	lateMax  time.Duration // 2 lease durations
	noRepeat bool          // never fault a client's operation twice in a row
	faulted  map[string]bool
	bad      func(azleasetest.Request, *rand.Rand) (azleasetest.Fault, bool) // the seed's bad period, if any
	late     map[azleasetest.Op]int
	requests int
	changes  int // every Change Lease: a hand-off costs two (holder, then successor)
	log      []string
}

func newFaultMix(seed uint64, rate float64, lease time.Duration, noRepeat bool) *faultMix {
	return &faultMix{
		sources:  simfault.NewSources(seed),
		rate:     rate,
		lateMax:  2 * lease,
		noRepeat: noRepeat,
		faulted:  map[string]bool{},
		late:     map[azleasetest.Op]int{},
	}
}

// draw chooses the fault for r.
func (m *faultMix) draw(r azleasetest.Request) azleasetest.Fault {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	if r.Op == azleasetest.OpChangeLease && r.Header.Get("X-Ms-Proposed-Lease-Id") != "" && r.Client != "operator" {
		m.changes++
	}
	rng := m.sources.For(r)
	var f azleasetest.Fault
	bad := false
	if m.bad != nil {
		f, bad = m.bad(r, rng)
	}
	if !bad {
		key := simfault.Key(r)
		if m.noRepeat && m.faulted[key] {
			// A transient fault never strikes the same operation of the
			// same client twice in a row: a retry gets through, so no
			// demotion is justified.
			m.faulted[key] = false
			return azleasetest.Fault{}
		}
		f = transientFault(rng, m.rate, m.lateMax)
		m.faulted[key] = f != (azleasetest.Fault{})
	}
	if f.Action == azleasetest.ApplyLate {
		m.late[r.Op]++
	}
	if debugSim && f != (azleasetest.Fault{}) {
		m.log = append(m.log, fmt.Sprintf("%v %s %s: %+v (bad period %v)", time.Now().Format("15:04:05.000"), r.Client, r.Op, f, bad))
	}
	return f
}

// badPeriod returns the faults of a bad period from start to end: most
// acquire answers are lost (the acquire may have landed) and every release
// is applied late, after its sender gave up. This is what once made a late
// give-back release free a newer term's lease. It runs under m.mu, and draws
// from rng, the source of the request's client and operation.
func badPeriod(m *faultMix, start, end time.Time) func(azleasetest.Request, *rand.Rand) (azleasetest.Fault, bool) {
	return func(r azleasetest.Request, rng *rand.Rand) (azleasetest.Fault, bool) {
		if now := time.Now(); now.Before(start) || !now.Before(end) {
			return azleasetest.Fault{}, false
		}
		switch r.Op {
		case azleasetest.OpAcquireLease:
			if rng.IntN(10) < 7 {
				return []azleasetest.Fault{{Action: azleasetest.ApplyThenDrop}, {Action: azleasetest.ApplyThenHang}}[rng.IntN(2)], true
			}
		case azleasetest.OpReleaseLease:
			return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: time.Duration(rng.Int64N(int64(m.lateMax) + 1))}, true
		}
		return azleasetest.Fault{}, false
	}
}

var debugSim = os.Getenv("AZLEASE_DEBUG_SIM") != ""

// simStats is what one run of a scenario measured.
type simStats struct {
	terms           int
	outside         int // believed intervals outside their lease
	overlaps        int // pairs of overlapping believed intervals
	epochs          int // terms whose epoch did not grow over an earlier term's
	sampledOverlaps int // instants at which two nodes answered IsLeader true
	demotions       int // terms that ended other than by a stop
	handoffs        []time.Duration
	failovers       []time.Duration
	requests        int
	causes          map[string]int
	late            map[azleasetest.Op]int // requests applied after their sender gave up
	work            workStats              // the leaders' fenced reads and writes
	breaks          int                    // operator breaks sent
	handedOver      int                    // terms begun by taking a hand-off over (Change Lease answered)
	yields          int                    // Yield calls that moved leadership
}

// runScenario plays sc with azlease Electors (naive=false) or with the
// naive acquire-renew loop (naive=true). It must run inside a synctest bubble.
func runScenario(t *testing.T, sc scenario, naive bool) simStats {
	opts := sc.opts
	c := newCluster(t, opts)
	if sc.work {
		c.work = &workCounter{}
	}
	c.emu.SetClockRate(sc.clockRate)
	mix := newFaultMix(sc.seed, sc.faultRate, opts.LeaseDuration, !sc.chaos)
	t0 := time.Now()
	if sc.badLen > 0 {
		mix.bad = badPeriod(mix, t0.Add(sc.badStart), t0.Add(sc.badStart+sc.badLen))
	}
	var outage atomic.Bool
	c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
		if r.Client == "observer" {
			return azleasetest.Fault{}
		}
		if outage.Load() {
			return azleasetest.Fault{Action: azleasetest.Fail}
		}
		return mix.draw(r)
	})

	names := make([]string, sc.nodes)
	paused := make([]atomic.Int64, sc.nodes) // nanoseconds the node's renewer will oversleep
	start := func(i int) {
		name := names[i]
		if naive {
			c.startNaive(name, opts.LeaseDuration, &paused[i])
			return
		}
		o := opts
		o.Identity = name
		if sc.priorities != nil {
			o.Priority = sc.priorities[i]
		}
		e, err := azlease.NewElector(c.emu.client(name), c.blob, &o)
		require.NoError(t, err)
		azlease.SetBeforeRenew(e, func() {
			if d := paused[i].Swap(0); d > 0 {
				time.Sleep(time.Duration(d))
			}
		})
		require.NoError(t, e.Start(context.Background(), c.task(name)))
		c.mu.Lock()
		c.nodes[name] = e
		c.mu.Unlock()
	}
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
		start(i)
	}

	stopSampling := make(chan struct{})
	var wg sync.WaitGroup
	var sampled int
	wg.Go(func() { sampled = c.sample(97*time.Millisecond, stopSampling) })

	var st simStats
	var pending sync.WaitGroup
	for _, ev := range sc.events {
		time.Sleep(time.Until(t0.Add(ev.at)))
		name := names[ev.node]
		switch ev.kind {
		case "stop":
			c.mu.Lock()
			n := c.nodes[name]
			c.mu.Unlock()
			wasLeader := n.IsLeader()
			stopped := time.Now()
			require.NoError(t, n.Stop(context.Background()))
			if wasLeader {
				if d, ok := nextLeaderAfter(c, stopped, name, time.Minute); ok {
					st.handoffs = append(st.handoffs, d)
				}
			}
			time.Sleep(ev.dur)
			start(ev.node)
		case "crash":
			c.mu.Lock()
			wasLeader := c.nodes[name].IsLeader()
			c.mu.Unlock()
			how := azleasetest.Hang
			if ev.dur%2 == 0 {
				how = azleasetest.Drop
			}
			crashed := time.Now()
			c.partition(name, how)
			if wasLeader && sc.nodes > 1 {
				if d, ok := nextLeaderAfter(c, crashed, name, 2*time.Minute); ok {
					st.failovers = append(st.failovers, d)
				}
			}
			pending.Go(func() {
				time.Sleep(ev.dur)
				c.heal(name)
			})
		case "outage":
			outage.Store(true)
			time.Sleep(min(ev.dur, 10*time.Second))
			outage.Store(false)
		case "pause":
			paused[ev.node].Store(int64(ev.dur))
		case "break":
			st.breaks++
			c.operatorBreak(opts.LeaseDuration, ev.dur, &pending)
		case "yield":
			if naive {
				break
			}
			for _, l := range c.leaders() {
				if e := c.elector(l); e != nil {
					pending.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						if _, err := e.Yield(ctx); err == nil {
							mix.mu.Lock()
							st.yields++
							mix.mu.Unlock()
						}
					})
				}
			}
		}
	}
	time.Sleep(time.Until(t0.Add(sc.length)))
	pending.Wait()
	close(stopSampling)
	wg.Wait()
	c.stopAll()

	st.sampledOverlaps = sampled
	mix.mu.Lock()
	st.requests = mix.requests
	st.handedOver = mix.changes / 2
	st.late = mix.late
	faultLog := mix.log
	mix.mu.Unlock()
	if c.work != nil {
		st.work = c.work.snapshot()
	}
	var checkErr error
	st.outside, st.overlaps, st.epochs, checkErr = c.violations()
	if debugSim && (checkErr != nil || st.work.stale > 0) {
		t.Logf("%v: faults injected:\n%s", sc, strings.Join(faultLog, "\n"))
		t.Logf("%v: %v", sc, checkErr)
	}
	st.causes = map[string]int{}
	c.mu.Lock()
	terms := append([]believed(nil), c.terms...)
	c.mu.Unlock()
	st.terms = len(terms)
	for _, b := range terms {
		cause := "stopped"
		if b.cause != nil && !errors.Is(b.cause, azlease.ErrStopped) {
			st.demotions++
			cause = causeName(b.cause)
		}
		st.causes[cause]++
	}
	return st
}

func causeName(err error) string {
	switch {
	case errors.Is(err, azlease.ErrPaused):
		return "paused"
	case errors.Is(err, azlease.ErrDeadlinePassed):
		return "deadline"
	case errors.Is(err, azlease.ErrLeaseBroken):
		return "broken"
	case errors.Is(err, azlease.ErrLeaseLost):
		return "lost"
	case errors.Is(err, errNaiveDemoted):
		return "renew error"
	}
	return err.Error()
}

// nextLeaderAfter polls until a node other than old leads, and returns how
// long after since that was.
func nextLeaderAfter(c *cluster, since time.Time, old string, limit time.Duration) (time.Duration, bool) {
	for deadline := since.Add(limit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range c.leaders() {
			if l != old {
				return time.Since(since), true
			}
		}
	}
	return 0, false
}

// TestElectorSafetySimulation plays hundreds of random scenarios in fake
// time and checks, for each, that no believed leadership interval lies
// outside the lease Azure granted it and that no two overlap. Each seed
// draws its own fault rate (0–30 % of requests: 503, 500, lost connections,
// lost responses, slow requests and responses, hangs, and requests applied
// 0–2 lease durations after their sender gave up), server clock speed (up to
// 4 % fast or 1 % slow, inside the default safety margin), and a schedule of
// graceful stops, crashes (partitions that hang or drop), whole-service
// outages and renewer pauses; half the seeds add an operator breaking the
// lease, a third a bad period of lost acquire answers and late releases.
// Leaders write, set metadata and read through their term meanwhile, and no
// read may return a newer term's content.
func TestElectorSafetySimulation(t *testing.T) {
	n := simSeeds()
	var total simStats
	total.causes = map[string]int{}
	simulation[scenario, simStats]{
		seeds:    n,
		scenario: workScenario(true),
		play:     func(t *testing.T, sc scenario) simStats { return runScenario(t, sc, false) },
		check: func(t *testing.T, sc scenario, st simStats) {
			if st.outside+st.overlaps+st.epochs+st.sampledOverlaps+st.work.stale > 0 {
				t.Errorf("%v: %d intervals outside their lease, %d overlapping pairs, %d epochs that did not grow, %d sampled overlaps, %d stale reads", sc, st.outside, st.overlaps, st.epochs, st.sampledOverlaps, st.work.stale)
			}
		},
		add: func(_ scenario, st simStats) { total.add(st) },
	}.run(t)
	t.Logf("%d seeds: %d terms, %d demotions %v, %d believed intervals outside their lease, %d overlapping pairs, %d epochs that did not grow, %d sampled overlaps, %d stale reads; %d requests, applied late %v; %d operator breaks; about %d hand-offs (%d yields); leaders' fenced work: %v",
		n, total.terms, total.demotions, total.causes, total.outside, total.overlaps, total.epochs, total.sampledOverlaps, total.work.stale, total.requests, total.late, total.breaks, total.handedOver, total.yields, total.work)
}

// workScenario makes seed's scenario (newScenario, with or without chaos)
// with the leaders doing fenced work.
func workScenario(chaos bool) func(seed uint64) scenario {
	return func(seed uint64) scenario {
		sc := newScenario(seed, chaos)
		sc.work = true
		return sc
	}
}

// TestElectorNoFalseDemotion: with transient faults only (a fifth of all
// requests fail in every way but a partition), azlease never demotes its
// leader: nothing in those scenarios justifies it.
func TestElectorNoFalseDemotion(t *testing.T) {
	n := max(simSeeds()/10, 5)
	var total simStats
	total.causes = map[string]int{}
	simulation[scenario, simStats]{
		seeds:    n,
		scenario: workScenario(false),
		play:     func(t *testing.T, sc scenario) simStats { return runScenario(t, sc, false) },
		check: func(t *testing.T, sc scenario, st simStats) {
			require.Zero(t, st.outside+st.overlaps+st.epochs+st.sampledOverlaps+st.work.stale)
			require.Zero(t, st.demotions, "%v: demoted under transient faults: %v", sc, st.causes)
		},
		add:   func(_ scenario, st simStats) { total.add(st) },
		rerun: func(seed uint64) uint64 { return 10 * (seed + 1) },
	}.run(t)
	t.Logf("%d seeds: %d terms, %d demotions, %d believed intervals outside their lease, %d overlapping pairs, %d epochs that did not grow, %d sampled overlaps; %d requests, applied late %v; leaders' fenced work: %v",
		n, total.terms, total.demotions, total.outside, total.overlaps, total.epochs, total.sampledOverlaps, total.requests, total.late, total.work)
}

func (s *simStats) add(o simStats) {
	s.terms += o.terms
	s.outside += o.outside
	s.overlaps += o.overlaps
	s.epochs += o.epochs
	s.sampledOverlaps += o.sampledOverlaps
	s.demotions += o.demotions
	s.handoffs = append(s.handoffs, o.handoffs...)
	s.failovers = append(s.failovers, o.failovers...)
	s.requests += o.requests
	for k, v := range o.causes {
		s.causes[k] += v
	}
	if s.late == nil {
		s.late = map[azleasetest.Op]int{}
	}
	for k, v := range o.late {
		s.late[k] += v
	}
	s.work.add(o.work)
	s.breaks += o.breaks
	s.handedOver += o.handedOver
	s.yields += o.yields
}

// naive is a naive acquire-renew loop, the baseline the simulation compares
// azlease against: acquire, or renew the lease it has, every LeaseDuration −
// 2 s; it is master while its last call succeeded and demotes on the first
// error. Its calls use the SDK's default retries and no deadline of their
// own, and it believes from the moment a response arrives until a renewal
// fails.
type naive struct {
	c      *cluster
	name   string
	cc     *container.Client
	period time.Duration
	pause  *atomic.Int64

	mu     sync.Mutex
	master bool
	cur    believed
	stop   context.CancelFunc
	done   chan struct{}
}

var errNaiveDemoted = errors.New("naive: renew failed")

// startNaive starts the naive acquire-renew loop as node name; pause, when set, makes it
// oversleep once as the electors' renewers do in the simulation.
func (c *cluster) startNaive(name string, leaseDuration time.Duration, pause *atomic.Int64) {
	if pause == nil {
		pause = new(atomic.Int64)
	}
	n := startNaive(c, name, leaseDuration, pause)
	c.mu.Lock()
	c.nodes[name] = n
	c.mu.Unlock()
}

// startAny starts node name as an azlease Elector or as the naive loop.
func (c *cluster) startAny(name string, naive bool) {
	if naive {
		c.startNaive(name, azlease.DefaultDuration, nil)
		return
	}
	c.start(name, nil)
}

func startNaive(c *cluster, name string, leaseDuration time.Duration, pause *atomic.Int64) *naive {
	ctx, cancel := context.WithCancel(context.Background())
	n := &naive{c: c, name: name, cc: c.emu.client(name), period: leaseDuration - 2*time.Second, pause: pause, stop: cancel, done: make(chan struct{})}
	go n.run(ctx, int32(leaseDuration/time.Second))
	return n
}

func (n *naive) IsLeader() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.master
}

func (n *naive) Stop(context.Context) error {
	n.stop()
	<-n.done
	return nil
}

func (n *naive) demote(cause error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.master {
		n.cur.end, n.cur.cause = time.Now(), cause
		n.c.record(n.cur)
		n.master = false
	}
}

func (n *naive) run(ctx context.Context, secs int32) {
	defer close(n.done)
	defer n.demote(azlease.ErrStopped)
	blob := n.cc.NewBlobClient(n.c.blob)
	var leaseID string
	for ctx.Err() == nil {
		if d := n.pause.Swap(0); d > 0 {
			time.Sleep(time.Duration(d))
		}
		if leaseID == "" {
			id := fmt.Sprintf("%08x-0000-4000-8000-%012x", rand.Uint32(), rand.Uint64()&0xffffffffffff)
			lc, _ := lease.NewBlobClient(blob, &lease.BlobClientOptions{LeaseID: to.Ptr(id)})
			if _, err := lc.AcquireLease(ctx, secs, nil); err == nil {
				leaseID = id
				n.mu.Lock()
				n.master = true
				n.cur = believed{node: n.name, leaseID: id, start: time.Now()}
				n.mu.Unlock()
			} else if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
				_, _ = n.c.emu.client(n.name).Create(ctx, nil)
				_, _ = n.cc.NewBlockBlobClient(n.c.blob).UploadBuffer(ctx, nil, nil)
				continue
			}
		} else {
			lc, _ := lease.NewBlobClient(blob, &lease.BlobClientOptions{LeaseID: to.Ptr(leaseID)})
			if _, err := lc.RenewLease(ctx, nil); err != nil {
				n.demote(errNaiveDemoted)
				leaseID = ""
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(n.period):
		}
	}
}

// TestNaiveLoopComparison runs a naive acquire-renew loop through the same kind of
// scenarios. It asserts nothing about the naive loop's safety, which is the
// point: it reports how often it overlapped and falsely demoted. With
// AZLEASE_SIM_REPORT=path it also writes the side-by-side figures there.
func TestNaiveLoopComparison(t *testing.T) {
	n := max(simSeeds()/5, 10)
	report := os.Getenv("AZLEASE_SIM_REPORT")
	type row struct{ az, nv simStats }
	rows := map[string]*row{"chaos": {}, "transient": {}}
	for _, mode := range []string{"chaos", "transient"} {
		r := rows[mode]
		r.az.causes, r.nv.causes = map[string]int{}, map[string]int{}
		// Seeds run side by side, one per core (as simulation.run does).
		var (
			mu  sync.Mutex
			wg  sync.WaitGroup
			sem = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
		)
		for seed := range uint64(n) {
			sc := newScenario(seed, mode == "chaos")
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				t.Run(fmt.Sprintf("%s/%d", mode, seed), func(t *testing.T) {
					var az, nv simStats
					synctest.Test(t, func(t *testing.T) { az = runScenario(t, sc, false) })
					synctest.Test(t, func(t *testing.T) { nv = runScenario(t, sc, true) })
					mu.Lock()
					r.az.add(az)
					r.nv.add(nv)
					mu.Unlock()
				})
			})
		}
		wg.Wait()
		require.Zero(t, r.az.outside+r.az.overlaps+r.az.epochs+r.az.sampledOverlaps, "azlease must be safe in every scenario")
		t.Logf("%s, %d seeds: azlease %d terms, %d unsafe intervals, %d overlaps, %d demotions; naive %d terms, %d unsafe intervals, %d overlaps, %d demotions",
			mode, n, r.az.terms, r.az.outside, r.az.overlaps, r.az.demotions, r.nv.terms, r.nv.outside, r.nv.overlaps, r.nv.demotions)
	}
	if report == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Simulated in fake time (testing/synctest) against the emulator, %d seeds per mode, 10 minutes each.\n", n)
	fmt.Fprintf(&b, "\"chaos\": per-request faults at 0–30 %% (including requests applied 0–2 lease durations after their sender gave up),\n")
	fmt.Fprintf(&b, "server clock ×0.99–1.04, and per seed a schedule of graceful stops, crashes (partitions that hang or drop requests),\n")
	fmt.Fprintf(&b, "whole-service outages (1–10 s) and renewer pauses (1–40 s); in half the seeds an operator breaks the lease, in a third\n")
	fmt.Fprintf(&b, "a bad period loses acquire answers and applies releases late.\n")
	fmt.Fprintf(&b, "\"transient\": 20 %% of requests fail (503, 500, lost connection, lost response, slow, hung, applied late), never twice\n")
	fmt.Fprintf(&b, "in a row for one client's operation, and nothing else, so every demotion there is a false one. In \"chaos\", azlease\n")
	fmt.Fprintf(&b, "demotes when the lease is broken, or at its validity deadline when a partition, an outage or a pause kept every renewal\n")
	fmt.Fprintf(&b, "from landing in time; it cannot know more, and demotes before Azure's lease ends.\n")
	fmt.Fprintf(&b, "Believed intervals and overlaps are checked against the emulator's true lease grants; two-leader instants are sampled\n")
	fmt.Fprintf(&b, "every 97 ms of fake time.\n\n")
	fmt.Fprintf(&b, "| mode | loop | terms | intervals outside their lease | overlapping pairs | sampled instants with two leaders | demotions | requests |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, mode := range []string{"chaos", "transient"} {
		r := rows[mode]
		for _, x := range []struct {
			name string
			s    simStats
		}{{"azlease", r.az}, {"naive acquire-renew loop", r.nv}} {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d |\n", mode, x.name, x.s.terms, x.s.outside, x.s.overlaps, x.s.sampledOverlaps, x.s.demotions, x.s.requests)
		}
	}
	az := rows["chaos"].az
	fmt.Fprintf(&b, "\nUnder chaos (faults on the followers' polls too), azlease's simulated handoff after a graceful stop: %s;\nfailover after a crash: %s. Without faults, see the next table.\n",
		percentiles(az.handoffs), percentiles(az.failovers))
	old, _ := os.ReadFile(report)
	require.NoError(t, os.WriteFile(report, append(old, b.String()...), 0o644))
}

// quantile returns the p-quantile of ds (0 when empty).
func quantile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// percentiles formats the median and p99 of ds.
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	return fmt.Sprintf("median %v, p99 %v (n=%d)", quantile(ds, 0.5).Round(time.Millisecond), quantile(ds, 0.99).Round(time.Millisecond), len(ds))
}

// TestSimulatedTimings measures, in fake time with default settings and no
// faults, the graceful handoff and crash failover times (200 runs each, with
// the stop at a random phase of the renew and poll cycles) and the requests
// per hour of a leader and a follower, for azlease and for the naive
// acquire-renew loop.
// With AZLEASE_SIM_REPORT set, it appends them to that file.
func TestSimulatedTimings(t *testing.T) {
	azlease.HeavyTest(t)
	runs := 200
	switch {
	case testing.Short():
		runs = 20
	case os.Getenv("AZLEASE_SIM_REPORT") == "":
		runs = 50 // make test: the checks below, not the report's figures
	}
	type figures struct {
		handoff, failover []time.Duration
		leaderPerHour     int
		followerPerHour   int
	}
	measure := func(naive bool) figures {
		var f figures
		for run := range runs {
			for _, crash := range []bool{false, true} {
				synctest.Test(t, func(t *testing.T) {
					c := newCluster(t, azlease.ElectorOptions{})
					c.startAny("a", naive)
					c.waitLeader(time.Minute)
					c.startAny("b", naive)
					// A random phase relative to renewals and polls.
					time.Sleep(30*time.Second + time.Duration(rand.New(rand.NewPCG(uint64(run), 1)).Int64N(int64(15*time.Second))))
					since := time.Now()
					if crash {
						c.partition("a", azleasetest.Hang)
					} else {
						c.mu.Lock()
						a := c.nodes["a"]
						c.mu.Unlock()
						require.NoError(t, a.Stop(context.Background()))
					}
					d, ok := nextLeaderAfter(c, since, "a", 3*time.Minute)
					require.True(t, ok, "no new leader (naive=%v crash=%v)", naive, crash)
					if crash {
						f.failover = append(f.failover, d)
					} else {
						f.handoff = append(f.handoff, d)
					}
					c.stopAll()
				})
			}
		}
		// Requests per hour: one leader, one follower, an hour of fake time.
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, azlease.ElectorOptions{})
			var mu sync.Mutex
			count := map[string]int{}
			c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
				mu.Lock()
				count[r.Client]++
				mu.Unlock()
				return azleasetest.Fault{}
			})
			c.startAny("leader", naive)
			c.waitLeader(time.Minute)
			c.startAny("follower", naive)
			time.Sleep(time.Minute) // settle
			mu.Lock()
			l0, f0 := count["leader"], count["follower"]
			mu.Unlock()
			time.Sleep(time.Hour)
			mu.Lock()
			f.leaderPerHour, f.followerPerHour = count["leader"]-l0, count["follower"]-f0
			mu.Unlock()
			c.stopAll()
		})
		return f
	}
	az, nv := measure(false), measure(true)
	t.Logf("azlease: handoff %s, failover %s, leader %d req/h, follower %d req/h", percentiles(az.handoff), percentiles(az.failover), az.leaderPerHour, az.followerPerHour)
	t.Logf("naive:   handoff %s, failover %s, leader %d req/h, follower %d req/h", percentiles(nv.handoff), percentiles(nv.failover), nv.leaderPerHour, nv.followerPerHour)
	require.Less(t, quantile(az.handoff, 0.5), 7*time.Second, "a graceful handoff takes about half a poll interval")
	require.Less(t, quantile(az.failover, 0.99), 21*time.Second, "a failover takes at most a lease duration and a poll interval")
	require.Less(t, quantile(az.handoff, 0.5), quantile(nv.handoff, 0.5))

	report := os.Getenv("AZLEASE_SIM_REPORT")
	if report == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nDefault settings (15 s lease renewed every 5 s, followers polling every 5 s ± 20 %%), no faults, %d runs each,\n", runs)
	fmt.Fprintf(&b, "the stop or crash at a random phase of the renew and poll cycles; the naive acquire-renew loop acts every 13 s and never releases.\n")
	fmt.Fprintf(&b, "A graceful handoff is timed from the call to Stop to the new leader: with planned succession the old leader leads on\n")
	fmt.Fprintf(&b, "until its successor acknowledged (about a follower's poll), and the time without a leader is a fraction of a second\n")
	fmt.Fprintf(&b, "(see Planned succession below).\n\n")
	fmt.Fprintf(&b, "| loop | graceful handoff | crash failover | leader requests/hour | follower requests/hour |\n|---|---|---|---:|---:|\n")
	fmt.Fprintf(&b, "| azlease | %s | %s | %d | %d |\n", percentiles(az.handoff), percentiles(az.failover), az.leaderPerHour, az.followerPerHour)
	fmt.Fprintf(&b, "| naive acquire-renew loop | %s | %s | %d | %d |\n", percentiles(nv.handoff), percentiles(nv.failover), nv.leaderPerHour, nv.followerPerHour)
	old, _ := os.ReadFile(report)
	require.NoError(t, os.WriteFile(report, append(old, b.String()...), 0o644))
}
