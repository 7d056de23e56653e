package main

// The harness's smoke test (every cell of every contender gives figures,
// with tiny parameters; no timed assertion) and the arithmetic of its
// report.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testLog writes the harness's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestEveryCellHasFigures runs every scenario once on every contender with
// tiny parameters: each gives every cell its figures without an error
// (exclusion included: the harness checks it). Figures are only checked to
// exist (and the fair Mutex's order in the order scenario); how large they
// are is the benchmark's business.
func TestEveryCellHasFigures(t *testing.T) {
	p := params{
		waiters: []int{1, 3}, spacing: 20 * time.Millisecond, hold: 20 * time.Millisecond,
		costWaiters: 3, costWindows: []costWindow{{100 * time.Millisecond, 200 * time.Millisecond}, {400 * time.Millisecond, 200 * time.Millisecond}}, costReps: 1,
		contenders: 3, window: 300 * time.Millisecond, reps: 1,
		etcdTTL: 2 * time.Second, // etcd's shortest with its default election timeout
		holds:   []time.Duration{0, 20 * time.Millisecond}, holdWaiters: []int{1, 3}, handoffs: 2, longHandoffs: 1, longReps: 1,
		standStill: 600 * time.Millisecond, passoverWaiters: 3, passoverSpacing: 20 * time.Millisecond, passoverHold: 5 * time.Millisecond,
		// 200 ms between asks: the order asserted below is asking order, which
		// is the lock's (storage's) order only when each waiter's first
		// requests land before the next asks; with 20 ms, a loaded 2-core CI
		// machine under -race most likely joined a waiter after the next (2 overtakes
		// in the baseline row of a fresh-clone make test, 2026-11-28).
		deadWaiters: 5, deadSpacing: 200 * time.Millisecond, deadHold: 5 * time.Millisecond, deadCut: time.Second,
	}
	require.NoError(t, p.validate())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r, err := run(ctx, p, contenders(), testLog{t})
	require.NoError(t, err)
	report := render(r)
	t.Log("\n" + report)

	for _, c := range r.contenders {
		require.False(t, r.notBuilt[c.key], c.name)
		for _, k := range r.keys(c.key) {
			ce := r.cells[k]
			require.NotNil(t, ce, k)
			require.NoError(t, ce.err, k)
		}
		for _, w := range p.waiters {
			ce := r.cells[orderKey(c.key, w)]
			require.Len(t, ce.orders, p.reps, c.name)
			o := ce.orders[0]
			assert.ElementsMatch(t, o.served, seq(w), "%s: every waiter served once", c.name)
			assert.Len(t, o.gaps, w, c.name)
			assert.Len(t, o.called, w, c.name)
			if c.key == "fair" || strings.HasPrefix(c.key, "etcd") {
				assert.Equal(t, seq(w), o.served, "%s serves in order", c.name)
			}
		}
		cost := r.cells[costKey(c.key)]
		require.Len(t, cost.costs, p.reps, c.name)
		require.Len(t, cost.costs[0].requests, 2, c.name)
		if c.key == "fair" {
			assert.Positive(t, cost.costs[0].requests[0].sent, "the first in line looks")
		}
		tp := r.cells[throughputKey(c.key)]
		require.Len(t, tp.tps, p.reps, c.name)
		assert.Len(t, tp.tps[0].acquisitions, p.contenders, c.name)
		assert.Positive(t, tp.tps[0].elapsed, c.name)
		for _, how := range deadHows {
			assert.Len(t, r.cells[deadKey(c.key, how)].gaps, p.reps, "%s, %s", c.name, how)
		}
		for _, h := range p.holds {
			for _, w := range p.holdWaiters {
				ce := r.cells[holdsKey(c.key, h, w)]
				require.Len(t, ce.holds, p.reps, "%s, holds of %v, W = %d", c.name, h, w)
				hr := ce.holds[0]
				assert.GreaterOrEqual(t, hr.acquisitions, p.handoffs+1, c.name)
				assert.Len(t, hr.gaps, hr.acquisitions-1, c.name)
				for _, g := range hr.gaps {
					assert.Positive(t, g, "%s: the next Lock returns after the Unlock call", c.name)
				}
			}
		}
		for _, how := range standHows {
			ce := r.cells[passoverKey(c.key, how)]
			require.Len(t, ce.passovers, p.reps, "%s, pass-over %s", c.name, how)
			assert.Len(t, ce.passovers[0].passedOver, p.passoverWaiters, c.name)
			assert.Zero(t, ce.passovers[0].unserved, c.name)
		}
		for _, v := range queueVariants {
			ce := r.cells[deadQueueKey(c.key, v)]
			require.Len(t, ce.deadQueues, p.reps, "%s, dead waiters %s", c.name, v)
			served := p.deadWaiters
			if v == queueDead {
				served -= 2
			}
			assert.Len(t, ce.deadQueues[0].gaps, served, "%s: every live waiter served once", c.name)
			if c.key == "fair" || strings.HasPrefix(c.key, "etcd") {
				assert.Zero(t, ce.deadQueues[0].overtakes, "%s serves the others in order", c.name)
			}
		}
		assert.Contains(t, report, "| "+c.name+" | 3 | ", "its order row")
	}
	assert.NotContains(t, report, "**error**")
	assert.NotContains(t, report, "not run")
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestOvertakes: pairs served out of asking order, the figure in the
// issue's table (its W = 8 row: 4 1 5 3 7 0 2 6, 13 overtakes).
func TestOvertakes(t *testing.T) {
	for _, tc := range []struct {
		served []int
		want   int
	}{
		{nil, 0},
		{[]int{0, 1, 2}, 0},
		{[]int{1, 0, 2}, 1},
		{[]int{2, 1, 0}, 3},
		{[]int{4, 1, 5, 3, 7, 0, 2, 6}, 13},
	} {
		assert.Equal(t, tc.want, orderRun{served: tc.served}.overtakes(), "%v", tc.served)
	}
}

// TestReportArithmetic: nearest-rank quantiles, medians, ranges and the
// duration format of the tables.
func TestReportArithmetic(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	gaps := ms(5, 1, 4, 2, 3, 10, 9, 8, 7, 6)
	orig := slices.Clone(gaps)
	assert.Equal(t, 5*time.Millisecond, quantile(gaps, 0.5))
	assert.Equal(t, 9*time.Millisecond, quantile(gaps, 0.9))
	assert.Equal(t, 10*time.Millisecond, quantile(gaps, 0.99))
	assert.Equal(t, 10*time.Millisecond, quantile(gaps, 1))
	assert.Equal(t, orig, gaps, "quantile leaves its input alone")
	assert.Equal(t, time.Duration(0), quantile(nil, 0.5))

	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	assert.Equal(t, "3", withRange([]float64{3}, 0))
	assert.Equal(t, "3", withRange([]float64{3, 3}, 0))
	assert.Equal(t, "2.0 (1.0–4.0)", withRange([]float64{4, 1, 2}, 1))
	assert.Equal(t, "—", num(median(nil), 1))

	assert.Equal(t, "0.5 ms", dur(500*time.Microsecond))
	assert.Equal(t, "-0.3 ms", dur(-300*time.Microsecond))
	assert.Equal(t, "421 ms", dur(421*time.Millisecond))
	assert.Equal(t, "1.07 s", dur(1070*time.Millisecond))
}

// TestFairCostFormula: the fair Mutex's requests per second behind a holder
// (docs/design/fair-locks.md's formula), for 1, 2 and 50 waiters.
func TestFairCostFormula(t *testing.T) {
	renew := 1 / (0.95 * 5.0)
	head := 1/(0.95*2.0) + 1.0/30 // its looks behind a hold over 50 s old, and its listings
	assert.InDelta(t, head+renew, fairCostFormula(1), 1e-9)
	assert.InDelta(t, head+0.5+renew, fairCostFormula(2), 1e-9)
	h10 := 0.0
	for p := 2; p <= 10; p++ {
		h10 += 1 / (15 * float64(p))
	}
	assert.InDelta(t, head+0.5+h10+39.0/150+renew, fairCostFormula(50), 1e-9)
	assert.Less(t, fairCostFormula(50)-renew, 1/(0.95*2)+1, "issue 25's target: the head's poll rate + 1")
}

// TestHoldsArithmetic: the gaps of a holds run and the part of a hold in
// which the waiters' requests are counted.
func TestHoldsArithmetic(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	acqs := []holdsAcq{{got: at(0), called: at(10)}, {got: at(15), called: at(20)}, {got: at(31)}}
	assert.Equal(t, []time.Duration{5 * time.Millisecond, 11 * time.Millisecond}, holdsGaps(acqs))

	from, length := waitWindow(t0, 10*time.Minute, t0.Add(holdsSettle))
	assert.Equal(t, t0.Add(9*time.Minute), from, "the last minute of a long hold")
	assert.Equal(t, time.Minute, length)
	from, length = waitWindow(t0.Add(time.Minute), 2*time.Second, t0.Add(holdsSettle))
	assert.Equal(t, t0.Add(time.Minute), from, "the whole of a short hold")
	assert.Equal(t, 2*time.Second, length)
	_, length = waitWindow(t0.Add(time.Second), 2*time.Second, t0.Add(holdsSettle))
	assert.Zero(t, length, "nothing while the queue forms")
	_, length = waitWindow(t0.Add(time.Minute), 0, t0)
	assert.Zero(t, length, "a zero hold has no waiting")

	var p params
	require.NoError(t, parseHolds(&p, "0, 10ms,1m", "1,50"))
	assert.Equal(t, []time.Duration{0, 10 * time.Millisecond, time.Minute}, p.holds)
	assert.Equal(t, []int{1, 50}, p.holdWaiters)
	assert.Error(t, parseHolds(&params{}, "-1s", "1"))
	assert.Error(t, parseHolds(&params{}, "1s", "0"))
	assert.Equal(t, "0", holdLabel(0))
	assert.Equal(t, "10ms", holdLabel(10*time.Millisecond))
	assert.Equal(t, "10 min", holdLabel(10*time.Minute))
	assert.Equal(t, "1m30s", holdLabel(90*time.Second))
}

// TestPassOvers: acquisitions by later askers before a waiter's first.
func TestPassOvers(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	asked := []time.Time{at(0), at(10), at(20)}
	// 0 is served first; 2 is passed over by 1 (asked later? no: earlier)
	// and by 0 coming back (its second call began at 150).
	acqs := []passAcq{
		{who: 0, call: at(0), got: at(100)},
		{who: 1, call: at(10), got: at(120)},
		{who: 0, call: at(150), got: at(160)},
		{who: 1, call: at(170), got: at(180)},
		{who: 2, call: at(20), got: at(400)},
	}
	served := []time.Time{at(100), at(120), at(400)}
	assert.Equal(t, []int{0, 0, 2}, passOvers(asked, served, acqs))
}

// TestAttributeVictims: hand-offs that pass over a victim not served yet,
// or go to one, cost what they take beyond the ordinary gap.
func TestAttributeVictims(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	victim := func(i int) bool { return i == 2 || i == 4 }
	acqs := []queueAcq{
		{who: -1, got: at(0), called: at(100)},
		{who: 0, got: at(110), called: at(120)}, // 10 ms
		{who: 1, got: at(130), called: at(140)}, // 10 ms
		{who: 3, got: at(450), called: at(460)}, // passes 2 over: 310 ms
		{who: 5, got: at(480), called: at(490)}, // passes 4 over: 20 ms
		{who: 2, got: at(500), called: at(510)}, // to 2, back: 10 ms
		{who: 6, got: at(522)},                  // 12 ms
	}
	ordinary, costs := attributeVictims(acqs, victim, nil)
	assert.Equal(t, 10*time.Millisecond, ordinary)
	assert.Equal(t, []time.Duration{300 * time.Millisecond, 10 * time.Millisecond, 0}, costs)
	// Victim 2 could not reach storage until 505 ms (cut off): its
	// hand-off counts from then, not from 490.
	acqs[5].got = at(520)
	_, costs = attributeVictims(acqs, victim, map[int]time.Time{2: at(505)})
	assert.Equal(t, []time.Duration{300 * time.Millisecond, 10 * time.Millisecond, 5 * time.Millisecond}, costs)
	dead, cut := victims(50)
	assert.Equal(t, []int{10, 35}, dead)
	assert.Equal(t, 20, cut)
}

// TestCostWindows: -cost-windows' START+LENGTH pairs.
func TestCostWindows(t *testing.T) {
	var p params
	require.NoError(t, parseWindows(&p, "1m+1m, 5m+2m"))
	assert.Equal(t, []costWindow{{time.Minute, time.Minute}, {5 * time.Minute, 2 * time.Minute}}, p.costWindows)
	for _, bad := range []string{"", "1m", "1m+0s", "2m+1m,2m30s+1m", "x+1m"} {
		assert.Error(t, parseWindows(&params{}, bad), bad)
	}
}
