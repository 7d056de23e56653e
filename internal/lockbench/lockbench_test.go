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
			assert.Positive(t, cost.costs[0].requests[0].sent, "the first in line polls every 200 ms")
		}
		tp := r.cells[throughputKey(c.key)]
		require.Len(t, tp.tps, p.reps, c.name)
		assert.Len(t, tp.tps[0].acquisitions, p.contenders, c.name)
		assert.Positive(t, tp.tps[0].elapsed, c.name)
		for _, how := range []string{deadNone, deadCanceled, deadKilled} {
			assert.Len(t, r.cells[deadKey(c.key, how)].gaps, p.reps, "%s, %s", c.name, how)
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
// (the Mutex doc's formula), for 1, 2 and 50 waiters.
func TestFairCostFormula(t *testing.T) {
	renew := 1 / (0.95 * 5.0)
	head := 1/(0.95*0.2) + 1.0/30 // its polls and its listings
	assert.InDelta(t, head+renew, fairCostFormula(1), 1e-9)
	assert.InDelta(t, head+0.5+renew, fairCostFormula(2), 1e-9)
	h10 := 0.0
	for p := 2; p <= 10; p++ {
		h10 += 1 / (15 * float64(p))
	}
	assert.InDelta(t, head+0.5+h10+39.0/150+renew, fairCostFormula(50), 1e-9)
	assert.Less(t, fairCostFormula(50)-renew, 1/(0.95*0.2)+1, "issue 25's target: the head's poll rate + 1")
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
