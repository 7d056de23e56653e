package azlease_test

// The watcher rule of issue 35 (fairlock.go's watch): no holder passes a
// waiter over; the waiter behind a named successor does, once the
// successor's promise has run out. A live waiter that keeps its schedule is
// never passed over, whatever the stand-still before its turn.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestFairNoPassOverAfterAStandStill: ten live waiters queue, 100 ms apart,
// behind a holder that keeps the lock for a long stand-still (15 s, the
// issue's wire case, and 3 minutes), then unlocks; each waiter holds 10 ms
// once served. Waiters far back slept long during the stand-still and do
// not look in time when the queue moves fast again: the holder's wait used
// to pass them over (the benchmark: up to 2 pass-overs of one waiter, 8 in a
// row on the wire). Now nobody is passed over, and all are served in order.
func TestFairNoPassOverAfterAStandStill(t *testing.T) {
	for _, still := range []time.Duration{15 * time.Second, 3 * time.Minute} {
		t.Run(still.String(), func(t *testing.T) {
			var mu sync.Mutex
			missed := 0
			restore := azlease.SetFairHook(func(event, lock string, ticket uint64) {
				if event == "missed" {
					mu.Lock()
					missed++
					mu.Unlock()
				}
			})
			defer restore()
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				holder, err := newMutex(t, e, "holder", "m", nil).Lock(ctx)
				require.NoError(t, err)
				var (
					omu   sync.Mutex
					order []int
					wg    sync.WaitGroup
				)
				for i := range 10 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						lk, err := newMutex(t, e, fmt.Sprintf("w%d", i), "m", nil).Lock(ctx)
						if !assert.NoError(t, err) {
							return
						}
						omu.Lock()
						order = append(order, i)
						omu.Unlock()
						time.Sleep(10 * time.Millisecond)
						assert.NoError(t, lk.Unlock(ctx))
					}()
					time.Sleep(100 * time.Millisecond)
				}
				time.Sleep(still)
				start := time.Now()
				require.NoError(t, holder.Unlock(ctx))
				wg.Wait()
				t.Logf("after a stand-still of %v: ten served in %v", still, time.Since(start))
				assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, order, "in order")
				grants := e.Grants(testContainer, "m")
				for i := 1; i < len(grants); i++ {
					assert.False(t, grants[i].Start.After(grants[i-1].End), "the lease free between %v and %v", grants[i-1], grants[i])
				}
			})
			mu.Lock()
			defer mu.Unlock()
			assert.Zero(t, missed, "no live waiter passed over")
		})
	}
}
