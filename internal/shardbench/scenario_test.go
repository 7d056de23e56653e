package shardbench

// One run: a scenario (cold start, join, clean stop, crash) for one
// balancer and one seed, inside a synctest bubble, and the figures it
// yields.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// scenario is an event on a group of k shards and n replicas.
type scenario struct {
	event string // cold, join, stop, crash
	k, n  int
}

func (s scenario) String() string {
	switch s.event {
	case "cold":
		return fmt.Sprintf("K=%d, N=%d, cold start", s.k, s.n)
	case "join":
		return fmt.Sprintf("K=%d, N=%d→%d, join", s.k, s.n, s.n+1)
	case "stop":
		return fmt.Sprintf("K=%d, N=%d→%d, clean stop", s.k, s.n, s.n-1)
	}
	return fmt.Sprintf("K=%d, N=%d→%d, crash", s.k, s.n, s.n-1)
}

// env is what the replicas of a run share.
type env struct {
	srv   *azleasetest.Server
	obs   *observer
	names []string

	mu       sync.Mutex
	counters map[string]*counter
}

func (e *env) counter(id string) *counter {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.counters[id]
	if c == nil {
		c = &counter{}
		e.counters[id] = c
	}
	return c
}

// result is what one run measured.
type result struct {
	balanced      bool           // within the variant's limit after the event
	balanceAfter  time.Duration  // from the event to the start of the final balanced state
	moves, min    int            // ownership changes from the event on; the fewest that balance
	twice         time.Duration  // shard-time owned by two or more replicas, from the event on
	perReplicaH   float64        // requests per live replica-hour while balanced and idle
	failed        int64          // 4xx answers from the event to the end
	codes         map[string]int // those by operation, status and error code
	violations    int            // azlease only: believed intervals the checker refused
	violationText string
}

// run runs one scenario for one variant and seed.
func run(t *testing.T, sc scenario, v variant, seed uint64) result {
	var res result
	synctest.Test(t, func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(seed, uint64(sc.k)<<8|uint64(sc.n)))
		srv := azleasetest.NewServer(t, nil)
		e := &env{srv: srv, names: shards.Numbered(sc.k), counters: map[string]*counter{}}
		e.obs = newObserver(e.names)
		reps := map[string]replica{}
		start := func(id string, i int) {
			e.obs.setLive(id, true)
			reps[id] = v.start(t, e, id, seed*1000+uint64(i))
		}
		defer func() {
			for id, r := range reps {
				e.obs.setLive(id, false)
				r.end()
			}
		}()

		var failed0 int64          // 4xx answers before the event
		codes0 := map[string]int{} // by operation and code

		// N replicas start within 1 s, in random order.
		startAll := func() {
			at := make([]time.Duration, sc.n)
			for i := range at {
				at[i] = time.Duration(rnd.Int64N(int64(time.Second)))
			}
			order := make([]int, sc.n)
			for i := range order {
				order[i] = i
			}
			slices.SortFunc(order, func(a, b int) int { return int(at[a] - at[b]) })
			t0 := time.Now()
			for _, i := range order {
				time.Sleep(time.Until(t0.Add(at[i])))
				start(fmt.Sprintf("r%d", i), i)
			}
		}
		if sc.event == "cold" {
			e.obs.markEvent(time.Now())
			startAll()
		} else {
			startAll()
			// Balanced and quiet for a while, then the event at a random
			// phase of the cycles.
			if !waitBalanced(e.obs, v.hold, v.limit+10*time.Minute) {
				t.Errorf("%s, %s %s, seed %d: never balanced before the event: %v", sc, v.name, v.timing, seed, e.obs.counts())
				return
			}
			time.Sleep(time.Duration(rnd.Int64N(int64(v.interval))))
			counts := e.obs.counts()
			failed0, codes0 = e.requests(e.obs).failed, e.codes()
			e.obs.markEvent(time.Now())
			switch sc.event {
			case "join":
				id := fmt.Sprintf("r%d", sc.n)
				counts[id] = 0
				start(id, sc.n)
			case "stop":
				delete(counts, "r0")
				e.obs.setLive("r0", false)
				reps["r0"].stop()
				delete(reps, "r0")
			case "crash":
				delete(counts, "r0")
				e.obs.setLive("r0", false)
				reps["r0"].crash()
			}
			var cs []int
			for _, c := range counts {
				cs = append(cs, c)
			}
			res.min = minMoves(sc.k, cs)
		}
		if sc.event == "cold" {
			res.min = sc.k
		}
		eventAt := e.obs.event

		// Wait for the final balanced state: balanced for the first half
		// of hold, then measure the idle request rate over the second.
		res.balanced = waitBalanced(e.obs, v.hold/2, v.limit)
		before := e.requests(e.obs)
		from := time.Now()
		time.Sleep(v.hold / 2)
		after := e.requests(e.obs)
		since, moves, twice := e.obs.snapshot(time.Now())
		if since.IsZero() || since.After(from) {
			res.balanced = false // it moved again while measuring
		}
		if res.balanced {
			res.balanceAfter = since.Sub(eventAt)
		}
		res.moves, res.twice = moves, twice
		live := len(e.obs.counts())
		if live > 0 {
			res.perReplicaH = float64(after.requests-before.requests) / float64(live) / time.Since(from).Hours()
		}
		res.failed = after.failed - failed0
		res.codes = e.codes()
		for k, n := range codes0 {
			if res.codes[k] -= n; res.codes[k] == 0 {
				delete(res.codes, k)
			}
		}

		// Stop everything, then check azlease's believed intervals against
		// the server's grants.
		for id, r := range reps {
			e.obs.setLive(id, false)
			r.end()
		}
		clear(reps)
		if v.azlease {
			for _, s := range e.names {
				if err := azleasetest.CheckIntervals(srv.Grants(azleasetest.Container, "bench/shards/"+s), e.obs.ended(s, time.Now())); err != nil {
					res.violations++
					if res.violationText == "" {
						res.violationText = fmt.Sprintf("shard %s: %v", s, err)
					}
				}
			}
		}
	})
	return res
}

// waitBalanced waits until the group has been balanced for hold, for at
// most limit; it reports whether it was.
func waitBalanced(o *observer, hold, limit time.Duration) bool {
	deadline := time.Now().Add(limit + hold)
	for time.Now().Before(deadline) {
		since, _, _ := o.snapshot(time.Now())
		if !since.IsZero() && time.Since(since) >= hold {
			return true
		}
		time.Sleep(250 * time.Millisecond)
	}
	return false
}

// totals are request counts summed over replicas.
type totals struct{ requests, failed int64 }

// requests sums the counts of the live replicas (requests) and of every
// replica (failed).
func (e *env) requests(o *observer) totals {
	live := o.counts()
	e.mu.Lock()
	defer e.mu.Unlock()
	var t totals
	for id, c := range e.counters {
		if _, ok := live[id]; ok {
			t.requests += c.requests.Load()
		}
		t.failed += c.failed.Load()
	}
	return t
}

// codes sums the 4xx answers of every replica by operation and code.
func (e *env) codes() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{}
	for _, c := range e.counters {
		c.mu.Lock()
		for k, n := range c.codes {
			out[k] += n
		}
		c.mu.Unlock()
	}
	return out
}
