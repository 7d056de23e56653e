package shards_test

// The package's timing targets, measured in deterministic single-event
// scenarios without faults (cold start, join, clean stop, crash), over many
// runs: each run draws its own phase (when the event happens relative to
// the polls and renewals) and the library its own jitter. And the steady
// state: no move under 20 % failing requests for an hour, no failed
// request while idle, and the requests per replica-hour of the package
// documentation's formula.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// timingRuns is how many runs each timing scenario on 32 shards makes:
// -seeds, else half the simulation's default (make test: 2); those on 128
// shards make a sixth of that (at least one) unless -seeds is 20 or more.
func timingRuns() int {
	if *seedsFlag > 0 {
		return *seedsFlag
	}
	return max(simSeeds()/2, 2)
}

// timingCase is one kind of event on a group of n replicas and k shards
// with the default options.
type timingCase struct {
	event    string // cold, join, stop, crash
	k, n     int    // shards, replicas before the event (cold: started at once)
	minMoves int    // for a join: the fewest shards that must move
}

func (c timingCase) String() string {
	switch c.event {
	case "cold":
		return fmt.Sprintf("cold start of %d on %d shards", c.n, c.k)
	case "join":
		return fmt.Sprintf("join %d → %d on %d shards", c.n, c.n+1, c.k)
	}
	return fmt.Sprintf("%s %d → %d on %d shards", c.event, c.n, c.n-1, c.k)
}

// timingRun is what one run measured.
type timingRun struct {
	took   time.Duration // from the event to balanced
	bound  time.Duration
	moves  int // terms begun after the event
	others int // of those, of shards the event's replica did not own (stop, crash)
	extra  int // runs of the work restarted within a term
	grants int // cold start: shards granted more than once
	why    string
}

// runTiming plays one run of c: n replicas started within a second, then
// (but for a cold start) balanced, a random pause, and the event. d is the
// work's drain time. It must run inside a synctest bubble.
func runTiming(t *testing.T, c timingCase, seed uint64, d time.Duration) timingRun {
	rng := rand.New(rand.NewPCG(seed, 0x7141))
	w := newSimWorld(t, c.k, seed)
	w.rec.writeGap = 10 * time.Second
	P := longestPoll(shards.DefaultPollInterval)
	D := w.lease // 15 s: the simulation's (the package's default is 60 s)
	L := shards.DefaultListInterval
	var reps []*simReplica
	var last time.Time
	for i := range c.n {
		if i > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(time.Second) / int64(c.n))))
		}
		reps = append(reps, w.start(fmt.Sprintf("r%02d", i), shards.Options{}, d))
		last = time.Now()
	}
	var run timingRun
	if c.event == "cold" {
		run.bound = 2*P + time.Second
		var ok bool
		_, ok, run.why = w.waitBalanced(w.liveIDs(), run.bound+time.Minute, 100*time.Millisecond)
		run.took = time.Since(last) // from the last start
		if !ok {
			run.took = -1
		}
		for _, s := range w.names {
			if n := len(w.srv.Grants(azleasetest.Container, w.group+"/shards/"+s)); n != 1 {
				run.grants++
			}
		}
		until := time.Now()
		w.shutdown()
		run.moves, run.extra, _ = countChanges(runsBefore(w.rec.allRuns(), until), time.Time{})
		return run
	}
	_, ok, why := w.waitBalanced(w.liveIDs(), 2*P+2*time.Second, 100*time.Millisecond)
	require.True(t, ok, "%v: not balanced after the start: %s", c, why)
	time.Sleep(time.Duration(rng.Int64N(int64(D)))) // a random phase of the polls and renewals
	before := w.rec.running()
	var target *simReplica
	since := time.Now()
	switch c.event {
	case "join":
		run.bound = 2*P + d + time.Second
		w.start(fmt.Sprintf("r%02d", c.n), shards.Options{}, d)
	case "stop":
		run.bound = d + P + time.Second
		target = reps[rng.IntN(len(reps))]
		w.stop(target)
	case "crash":
		run.bound = D + L + 2*P + time.Second
		target = reps[rng.IntN(len(reps))]
		w.crash(target, azleasetest.Hang)
	}
	run.took, ok, run.why = w.waitBalanced(w.liveIDs(), run.bound+time.Minute, 100*time.Millisecond)
	if !ok {
		run.took = -1
	}
	until := time.Now()
	w.shutdown()
	in := runsBefore(w.rec.allRuns(), until)
	run.moves, run.extra, _ = countChanges(in, since)
	if target != nil {
		for _, r := range in {
			if !r.start.Before(since) && before[r.shard] != target.client {
				run.others++
			}
		}
	}
	return run
}

// TestShardsTimingTargets measures the package documentation's timing
// table in fake time, without faults, with the default options but a
// lease duration of 15 s (P = 2.4 s the longest jittered poll interval, L =
// 15 s the listing interval, D = 15 s), the work returning d (0 to 3 s, by
// run) after its context ends:
//
//	cold start of N within 1 s   balanced within 2P + 1 s of the last start, each shard granted once
//	join                         2P + d + 1 s, moving the fewest shards possible
//	clean stop                   d + P + 1 s, only its shards move
//	crash                        D + L + 2P + 1 s, only its shards move
func TestShardsTimingTargets(t *testing.T) {
	n := timingRuns()
	cases := []timingCase{
		{event: "cold", k: 32, n: 4},
		{event: "cold", k: 128, n: 8},
		{event: "join", k: 32, n: 4, minMoves: 6},
		{event: "join", k: 128, n: 8, minMoves: 14},
		{event: "stop", k: 32, n: 5},
		{event: "stop", k: 128, n: 9},
		{event: "crash", k: 32, n: 5},
		{event: "crash", k: 128, n: 9},
	}
	if thorough() {
		// The largest group the simulation runs, a run or two: each lists
		// 1,088 blobs per replica per poll.
		cases = append(cases,
			timingCase{event: "cold", k: 1024, n: 64},
			timingCase{event: "join", k: 1024, n: 63, minMoves: 16},
			timingCase{event: "crash", k: 1024, n: 64})
	}
	var table []string
	for _, c := range cases {
		var took, over []time.Duration
		var moves []int
		failed := 0
		runs := n
		switch {
		case c.k > 128:
			runs = max(n/100, 1)
		case c.k > 32 && !thorough():
			runs = max(n/6, 1) // each costs about six of those on 32 shards
		}
		t.Run(c.name(), func(t *testing.T) {
			for seed := range uint64(runs) {
				d := []time.Duration{0, 0, time.Second, 3 * time.Second}[seed%4]
				var run timingRun
				synctest.Test(t, func(t *testing.T) { run = runTiming(t, c, seed, d) })
				took = append(took, run.took)
				over = append(over, run.took-run.bound)
				moves = append(moves, run.moves)
				ok := run.took >= 0 && run.took <= run.bound
				ok = ok && assert.Zero(t, run.extra, "%v, run %d: runs of the work restarted within a term", c, seed)
				switch c.event {
				case "cold":
					ok = ok && assert.Zero(t, run.grants, "%v, run %d: shards granted more than once", c, seed)
					ok = ok && assert.Equal(t, c.k, run.moves, "%v, run %d: terms", c, seed)
				case "join":
					ok = ok && assert.Equal(t, c.minMoves, run.moves, "%v, run %d: moves", c, seed)
				default:
					ok = ok && assert.Zero(t, run.others, "%v, run %d: shards of other replicas moved", c, seed)
				}
				if run.took < 0 || run.took > run.bound {
					t.Errorf("%v, run %d (drain %v): balanced after %v, bound %v: %s", c, seed, d, run.took, run.bound, run.why)
				}
				if !ok {
					failed++
					t.Logf("reproduce with: go test ./shards/ -run 'TestShardsTimingTargets/%s' -args -seeds %d (run %d)", c.name(), seed+1, seed)
				}
			}
		})
		if len(took) == 0 {
			continue // not selected by -run
		}
		slices.Sort(moves)
		table = append(table, fmt.Sprintf("%-32s balanced after %s; over the bound by at most %v; moves %d–%d (minimum %s); %d runs failed",
			c.String()+":", durations(took), slices.Max(over).Round(time.Millisecond), moves[0], moves[len(moves)-1], minMovesText(c), failed))
	}
	t.Logf("P = 2.4 s, D = 15 s, d = 0, 0, 1 or 3 s by run:\n%s", strings.Join(table, "\n"))
}

// name is the subtest's name: "join/4to5/K32".
func (c timingCase) name() string {
	to := c.n - 1
	if c.event == "join" {
		to = c.n + 1
	}
	if c.event == "cold" {
		return fmt.Sprintf("cold/%d/K%d", c.n, c.k)
	}
	return fmt.Sprintf("%s/%dto%d/K%d", c.event, c.n, to, c.k)
}

func minMovesText(c timingCase) string {
	switch c.event {
	case "cold":
		return strconv.Itoa(c.k) + " acquisitions"
	case "join":
		return strconv.Itoa(c.minMoves)
	}
	return "its shards"
}

// runsBefore returns the runs that started before until.
func runsBefore(runs []workRun, until time.Time) []workRun {
	var in []workRun
	for _, r := range runs {
		if !r.start.After(until) {
			in = append(in, r)
		}
	}
	return in
}
