package azlease_test

// Issue 35 behind a second long hold: the first waiter of fifty-one is
// handed the lock after a hold of ten minutes and holds it ten minutes
// itself; the fifty behind it must stay as quiet as behind the first hold.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestFairSecondLongHoldStaysQuiet: fifty-one waiters queue behind a hold
// of ten minutes; the first of them is handed the lock and holds it ten
// minutes too. Over the last minute of that second hold the fifty others
// send at most 1.5 requests a second in all (issue 35), the one right
// behind the holder at most 1.1, none failed; the next hand-off comes
// within 5 % of the hold. On the code before: 1.63 to 1.72, the waiter
// right behind the first in line sending as much as it (0.5), and 26 of
// the 39 far back listing in that minute, in step.
func TestFairSecondLongHoldStaysQuiet(t *testing.T) {
	azlease.HeavyTest(t)
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		holder, err := newMutex(t, e, "holder", "m", nil).Lock(ctx)
		require.NoError(t, err)
		const n, hold = 51, 10 * time.Minute
		got := make(chan *azlease.Lock, n)
		began := time.Now()
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		cs := countedWaiters(wctx, t, e, n, &wg, got)
		time.Sleep(hold - n*100*time.Millisecond)
		require.NoError(t, holder.Unlock(ctx))
		first := <-got
		start := time.Now()
		time.Sleep(hold)
		// per[i][m]: waiter i's requests by operation in minute m of the
		// second hold.
		per := make([][]map[string]int, n)
		perMinute := make([]int, hold/time.Minute)
		for i, c := range cs {
			per[i] = make([]map[string]int, len(perMinute))
			for m := range per[i] {
				per[i][m] = map[string]int{}
			}
			c.mu.Lock()
			for _, s := range c.sends {
				m := int(s.at.Sub(start) / time.Minute)
				if m < 0 || m >= len(perMinute) {
					continue
				}
				per[i][m][s.op]++
				if i > 0 {
					perMinute[m]++
				}
			}
			c.mu.Unlock()
		}
		var b strings.Builder
		for m, k := range perMinute {
			fmt.Fprintf(&b, "minute %d: %.2f requests/s\n", m+1, float64(k)/60)
		}
		last := len(perMinute) - 1
		for i := 1; i < n; i++ {
			var ms []string
			for m := range perMinute {
				ms = append(ms, fmt.Sprint(opsString(per[i][m])))
			}
			fmt.Fprintf(&b, "position %2d (w%d): %s\n", i-1, i, strings.Join(ms, " | "))
		}
		t.Logf("%d waiters behind a second hold of %v, per minute of it:\n%s", n-1, hold, b.String())
		// The first hold, for comparison: fifty waiting behind it, w0 to
		// w49 (minute 1 begins as they join).
		first1 := make([]int, hold/time.Minute)
		for i, c := range cs {
			if i == n-1 {
				continue
			}
			c.mu.Lock()
			for _, s := range c.sends {
				if m := int(s.at.Sub(began) / time.Minute); m >= 0 && m < len(first1) {
					first1[m]++
				}
			}
			c.mu.Unlock()
		}
		var h1 []string
		for _, k := range first1 {
			h1 = append(h1, fmt.Sprintf("%.2f", float64(k)/60))
		}
		t.Logf("the same fifty behind the first hold, per minute: %s", strings.Join(h1, " "))
		group := func(lo, hi int) int { // positions lo..hi, the last minute
			k := 0
			for i := lo + 1; i <= hi+1 && i < n; i++ {
				for _, c := range per[i][last] {
					k += c
				}
			}
			return k
		}
		t.Logf("the last minute by position: first %d, second %d, 2-10 %d, 11- %d requests", group(0, 0), group(1, 1), group(2, 10), group(11, n))
		lastMinute := float64(perMinute[last]) / 60
		one := 0
		for _, k := range per[1][last] {
			one += k
		}
		assert.LessOrEqual(t, lastMinute, 1.5, "50 waiters over the second hold's last minute")
		assert.LessOrEqual(t, float64(one)/60, 1.1, "the first in line over the second hold's last minute")
		var failed []string
		for _, c := range cs {
			_, f := c.since(0, 0)
			failed = append(failed, f...)
		}
		assert.Empty(t, failed, "no failed request")
		// The hand-off after the second hold: within 5 % of it (issue 35).
		unlocked := time.Now()
		require.NoError(t, first.Unlock(ctx))
		next := <-got
		gap := time.Since(unlocked)
		t.Logf("the hand-off after the second hold: %v from the Unlock call", gap)
		assert.LessOrEqual(t, gap, hold/20)
		cancel()
		require.NoError(t, next.Unlock(ctx))
		wg.Wait()
		close(got)
		for lk := range got {
			_ = lk.Unlock(ctx)
		}
	})
}

// opsString is a tally as "list 2 read 1", by operation name.
func opsString(ops map[string]int) string {
	var ks []string
	for k := range ops {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b []string
	for _, k := range ks {
		b = append(b, fmt.Sprintf("%s %d", k, ops[k]))
	}
	if len(b) == 0 {
		return "-"
	}
	return strings.Join(b, " ")
}
