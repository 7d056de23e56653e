package azlease_test

// A hot fair lock's requests per acquisition, in fake time: 50 contenders
// that lock and unlock at once, over and over (issue 35's hot lock; the
// wire's figures, and its rate, are lockbench's).

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestFairHotLockRequests: with every request taking 0.5 ms, an
// acquisition costs about 9 requests: the successor's Change, renewal and
// epoch; the holder's Change and marker; the append and the entry of its
// next join, the entry's deletion; a listing as its turn nears, which
// mostly shows the lock handed to it. No listing as it joins (its place is
// known from its own Unlock's listing and its ticket: fairjoin.go; 10.1
// before), no head mark, no look as the first in line (the listing showed
// the hand-off), no listing of the tickets blobs (the generation is
// known), and Unlock lists nothing (the listing that made its caller first
// is milliseconds old). Not one request fails.
func TestFairHotLockRequests(t *testing.T) {
	azlease.HeavyTest(t)
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		const n = 50
		cs := make([]*counter, n)
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			taken int
		)
		wctx, stop := context.WithTimeout(ctx, 6*time.Second)
		defer stop()
		from := time.Now().Add(time.Second)
		for i := range cs {
			cs[i] = &counter{latency: 500 * time.Microsecond}
			m, err := azlease.NewMutex(countedClient(t, e.Server, fmt.Sprint("w", i), cs[i]), "m", nil)
			require.NoError(t, err)
			wg.Go(func() {
				for wctx.Err() == nil {
					lk, err := m.Lock(wctx)
					if err != nil {
						return
					}
					if time.Now().After(from) {
						mu.Lock()
						taken++
						mu.Unlock()
					}
					assert.NoError(t, lk.Unlock(ctx))
				}
			})
		}
		// Failures from the first second on (the contenders' first
		// Locks race for a lock nobody has made yet: refused requests) up
		// to the window's end (which cancels the waits: their requests go
		// unanswered, and a lease a waiter was being granted is given back
		// as TestFairHotLockIsQuiet says).
		marks := make([]int, n)
		time.Sleep(time.Until(from))
		for i, c := range cs {
			_, marks[i] = c.mark()
		}
		time.Sleep(time.Until(deadline(wctx)) - time.Nanosecond)
		var failed []string
		for i, c := range cs {
			_, fs := c.since(0, marks[i])
			failed = append(failed, fs...)
		}
		wg.Wait()
		ops := map[string]int{}
		total := 0
		for _, c := range cs {
			c.mu.Lock()
			for _, s := range c.sends {
				if s.at.After(from) {
					ops[s.op]++
					total++
				}
			}
			c.mu.Unlock()
		}
		keys := make([]string, 0, len(ops))
		for k := range ops {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return ops[keys[i]] > ops[keys[j]] })
		per := float64(total) / float64(taken)
		line := fmt.Sprintf("%d acquisitions in 5 s, %.2f requests each:", taken, per)
		for _, k := range keys {
			line += fmt.Sprintf(" %s %.2f", k, float64(ops[k])/float64(taken))
		}
		t.Log(line)
		assert.Greater(t, taken, 250, "acquisitions")
		assert.LessOrEqual(t, per, 9.6, "requests per acquisition")
		assert.LessOrEqual(t, float64(ops[opWrite])/float64(taken), 2.05, "metadata writes per acquisition: no head mark")
		assert.LessOrEqual(t, float64(ops[opList])/float64(taken), 1.1, "listings per acquisition: none in Unlock, none as it joins")
		assert.Empty(t, failed, "failed requests")
	})
}
