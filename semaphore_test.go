package azlease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/timing"
)

func newSemaphore(t *testing.T, e *emu, label, name string, n int, opts *azlease.MutexOptions) *azlease.Semaphore {
	t.Helper()
	s, err := azlease.NewSemaphore(e.client(label), name, n, opts)
	require.NoError(t, err)
	return s
}

func TestSemaphoreTryAcquireAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newSemaphore(t, e, "a", "exports", 2, nil)
		b := newSemaphore(t, e, "b", "exports", 2, nil)
		c := newSemaphore(t, e, "c", "exports", 2, nil)
		assert.Equal(t, 2, a.Slots())

		la, ok, err := a.TryAcquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		lb, ok, err := b.TryAcquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		assert.ElementsMatch(t, []string{"exports/slot-0", "exports/slot-1"}, []string{la.Name(), lb.Name()}, "one slot each")
		assert.Equal(t, epoch1, la.Epoch(), "epochs count per slot")
		assert.Equal(t, epoch1, lb.Epoch())

		_, ok, err = c.TryAcquire(ctx)
		require.NoError(t, err, "all slots held is a normal outcome")
		assert.False(t, ok)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = c.Acquire(wctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)

		got := make(chan *azlease.Lock)
		go func() {
			l, err := c.Acquire(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		time.Sleep(time.Minute) // both holders renew meanwhile
		require.True(t, la.Valid())
		freed := lb.Name()
		require.NoError(t, lb.Unlock(ctx))
		unlocked := time.Now()
		lc := <-got
		assert.LessOrEqual(t, time.Since(unlocked), timing.HeadLook(time.Minute, 200*time.Millisecond, time.Second)+100*time.Millisecond,
			"the first in line, behind a hold it saw for a minute, within 2 × PollInterval (timing.HeadLook)")
		assert.Equal(t, freed, lc.Name(), "the freed slot")
		assert.Equal(t, epoch1+1, lc.Epoch())
		require.NoError(t, la.Unlock(ctx))
		require.NoError(t, lc.Unlock(ctx))

		st, err := azlease.Inspect(ctx, e.client("x"), azlease.SlotName("exports", 0))
		require.NoError(t, err)
		assert.True(t, st.Exists)
	})
}

// TestSemaphoreNeverMoreThanN: seven processes, each with three goroutines,
// share a semaphore of three slots, while a tenth of all requests fail and
// the process inside is cut off from storage now and then (its slot is lost,
// then expires: a crash, as far as the others can tell). Every interval in
// which a holder believed it held a slot is checked against the lease the
// emulator actually granted on that slot, and no instant has more than three
// believed holders.
func TestSemaphoreNeverMoreThanN(t *testing.T) {
	azlease.HeavyTest(t)
	synctest.Test(t, func(t *testing.T) {
		const slots = 3
		c := newCluster(t, defaults)
		rng := rand.New(rand.NewPCG(7, 8))
		var rmu sync.Mutex
		c.setFaults(func(azleasetest.Request) azleasetest.Fault {
			rmu.Lock()
			defer rmu.Unlock()
			return transientFault(rng, 0.1, 0)
		})
		type held struct {
			slot, leaseID string
			start, end    time.Time
		}
		var (
			mu       sync.Mutex
			believed []held
			lastIn   atomic.Int64
			losses   atomic.Int64
		)
		stop := make(chan struct{})
		var chaos sync.WaitGroup
		chaos.Go(func() { // every 30 s, cut the last process that got a slot off for 20 s
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				case <-time.After(30 * time.Second):
				}
				p := fmt.Sprintf("p%d", lastIn.Load())
				if round == 0 {
					p = "p7" // the holder that keeps its slot until it loses it
				}
				c.partition(p, azleasetest.Hang)
				time.Sleep(20 * time.Second)
				c.heal(p)
			}
		})
		var wg sync.WaitGroup
		// One holder that keeps its slot until it loses it: cut off by the
		// first partition below, it must lose it at its validity deadline.
		stuck := newSemaphore(t, c.emu, "p7", "pool", slots, nil)
		wg.Go(func() {
			lock, err := stuck.Acquire(context.Background())
			if !assert.NoError(t, err) {
				return
			}
			lastIn.Store(7)
			h := held{slot: lock.Name(), leaseID: lock.Token().LeaseID, start: time.Now()}
			<-lock.Done()
			h.end = time.Now()
			if vu := lock.ValidUntil(); vu.Before(h.end) {
				h.end = vu
			}
			if err := lock.Unlock(context.Background()); errors.Is(err, azlease.ErrLeaseLost) {
				losses.Add(1)
			}
			mu.Lock()
			believed = append(believed, h)
			mu.Unlock()
		})
		for deadline := time.Now().Add(time.Minute); lastIn.Load() != 7; time.Sleep(10 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "the stuck holder never got a slot")
		}
		for p := range 7 {
			s := newSemaphore(t, c.emu, fmt.Sprintf("p%d", p), "pool", slots, nil)
			for g := range 3 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(p), uint64(g)))
					for range 6 {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
						lock, err := s.Acquire(ctx)
						cancel()
						if err != nil {
							continue // cut off while waiting: try again
						}
						lastIn.Store(int64(p))
						h := held{slot: lock.Name(), leaseID: lock.Token().LeaseID, start: time.Now()}
						select {
						case <-time.After(time.Duration(r.IntN(20000)) * time.Millisecond):
						case <-lock.Done():
						}
						h.end = time.Now()
						if vu := lock.ValidUntil(); vu.Before(h.end) {
							h.end = vu
						}
						if err := lock.Unlock(context.Background()); errors.Is(err, azlease.ErrLeaseLost) {
							losses.Add(1)
						}
						mu.Lock()
						believed = append(believed, h)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		close(stop)
		chaos.Wait()

		require.Greater(t, len(believed), 60)
		assert.Greater(t, losses.Load(), int64(0), "the test must actually lose slots")
		grants := map[string][]azleasetest.Grant{}
		for i := range slots {
			name := azlease.SlotName("pool", i)
			grants[name] = c.emu.Grants(testContainer, name)
		}
		type edge struct {
			at    time.Time
			delta int
		}
		var edges []edge
		for _, h := range believed {
			inside := false
			for _, g := range grants[h.slot] {
				if g.LeaseID == h.leaseID && !h.start.Before(g.Start) && !h.end.After(g.End) {
					inside = true
				}
			}
			assert.True(t, inside, "%s held %v–%v outside any lease the server granted it", h.slot, h.start, h.end)
			if h.end.After(h.start) {
				edges = append(edges, edge{h.start, 1}, edge{h.end, -1})
			}
		}
		sort.Slice(edges, func(i, j int) bool {
			if !edges[i].at.Equal(edges[j].at) {
				return edges[i].at.Before(edges[j].at)
			}
			return edges[i].delta < edges[j].delta // an end before a start at the same instant
		})
		most, now := 0, 0
		for _, e := range edges {
			now += e.delta
			most = max(most, now)
		}
		assert.LessOrEqual(t, most, slots, "never more than n holders at once")
		assert.Equal(t, slots, most, "the slots were all used at once")
		t.Logf("%d holdings, %d lost, at most %d at once", len(believed), losses.Load(), most)
	})
}

// TestSemaphoreCrashedHolderSlotFrees: a holder that stops renewing (cut off
// for good, as a crashed process is) keeps its slot until its lease expires,
// and then a waiter takes it.
func TestSemaphoreCrashedHolderSlotFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, defaults)
		ctx := context.Background()
		a := newSemaphore(t, c.emu, "a", "s", 2, nil)
		b := newSemaphore(t, c.emu, "b", "s", 2, nil)
		w := newSemaphore(t, c.emu, "w", "s", 2, nil)
		la, err := a.Acquire(ctx)
		require.NoError(t, err)
		lb, err := b.Acquire(ctx)
		require.NoError(t, err)
		time.Sleep(7 * time.Second) // a renews once
		c.partition("a", azleasetest.Hang)
		crashed := time.Now()
		lw, err := w.Acquire(ctx)
		require.NoError(t, err)
		g := c.emu.Grants(testContainer, la.Name())
		require.Len(t, g, 2)
		assert.False(t, time.Now().Before(g[0].End), "not before the crashed holder's lease expired")
		assert.LessOrEqual(t, time.Since(crashed), 15*time.Second+1200*time.Millisecond, "within the lease duration plus a poll")
		assert.Equal(t, la.Name(), lw.Name())
		<-la.Done()
		assert.ErrorIs(t, la.Err(), azlease.ErrDeadlinePassed)
		assert.True(t, lb.Valid(), "the other holder is unaffected")
		c.heal("a")
		require.ErrorIs(t, la.Unlock(ctx), azlease.ErrLeaseLost)
		require.NoError(t, lb.Unlock(ctx))
		require.NoError(t, lw.Unlock(ctx))
	})
}

// TestSemaphoreWaitersGetSlots: five waiters queue behind two holders; as
// holders finish, every waiter gets a slot, at most two at a time.
func TestSemaphoreWaitersGetSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		var inside, most atomic.Int32
		var wg sync.WaitGroup
		for i := range 7 {
			s := newSemaphore(t, e, fmt.Sprintf("p%d", i), "q", 2, nil)
			wg.Go(func() {
				lock, err := s.Acquire(ctx)
				if !assert.NoError(t, err) {
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(20 * time.Second) // outlives a lease: renewed
				assert.True(t, lock.Valid())
				inside.Add(-1)
				assert.NoError(t, lock.Unlock(ctx))
			})
		}
		wg.Wait()
		assert.Equal(t, int32(2), most.Load())
	})
}

func TestNewSemaphoreRejectsBadInput(t *testing.T) {
	cc := containerAt(t, "locks")
	for _, n := range []int{0, -1, azlease.MaxSlots + 1} {
		_, err := azlease.NewSemaphore(cc, "s", n, nil)
		requireOptionError(t, err, "n")
	}
	_, err := azlease.NewSemaphore(cc, "", 2, nil)
	requireOptionError(t, err, "name")
	_, err = azlease.NewSemaphore(cc, "bad/", 2, nil)
	requireOptionError(t, err, "name")
	_, err = azlease.NewSemaphore(nil, "s", 2, nil)
	requireOptionError(t, err, "container")
	_, err = azlease.NewSemaphore(cc, "s", 2, &azlease.MutexOptions{PollInterval: time.Microsecond})
	requireOptionError(t, err, "MutexOptions.PollInterval")
	s, err := azlease.NewSemaphore(cc, "s", azlease.MaxSlots, nil)
	require.NoError(t, err)
	assert.Equal(t, azlease.MaxSlots, s.Slots())
}

// TestAzuriteSemaphore: on the real wire, four holders share two slots:
// two are inside at once, never three. It used to hold each slot 150 ms and
// expect two holdings to overlap by luck, which under the full suite's load
// they did not (2 of 3 clean runs failed): hand-offs took longer than the
// holds, two holders unlocking together handed their slots to the same
// first waiter, and the second slot waited a head poll for a waiter served
// by the first. Now a holder stays inside until a second one is, or until
// nobody else has an acquisition left, so two at once holds by
// construction when the Semaphore lets a waiter have the free slot; a
// Semaphore that kept a slot free while someone waited would fail it
// (after the test's minute, not a timed assertion).
func TestAzuriteSemaphore(t *testing.T) {
	t.Parallel()
	name := unique("semaphore")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const holders, rounds = 4, 3
	var inside, most atomic.Int32
	var left [holders]atomic.Int32 // each holder's acquisitions still to make
	othersLeft := func(me int) (n int32) {
		for i := range left {
			if i != me {
				n += left[i].Load()
			}
		}
		return n
	}
	var wg sync.WaitGroup
	for h := range holders {
		left[h].Store(rounds)
		s, err := azlease.NewSemaphore(azuriteClient(t, name), "pool", 2, &azlease.MutexOptions{PollInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		wg.Go(func() {
			for range rounds {
				lock, err := s.Acquire(ctx)
				if !assert.NoError(t, err, "a slot while the other is held and the holder waits for a second one") {
					return
				}
				left[h].Add(-1)
				n := inside.Add(1)
				assert.LessOrEqual(t, n, int32(2), "never more than two")
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				for inside.Load() < 2 && othersLeft(h) > 0 && ctx.Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
				inside.Add(-1)
				assert.NoError(t, lock.Unlock(context.Background()))
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "both slots kept busy while holders waited")
	assert.Equal(t, int32(2), most.Load(), "two at once, never more")

	ctx = context.Background()
	a, err := azlease.NewSemaphore(azuriteClient(t, name), "pool", 2, nil)
	require.NoError(t, err)
	l1, ok, err := a.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	l2, ok, err := a.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.NotEqual(t, l1.Name(), l2.Name())
	_, ok, err = a.TryAcquire(ctx)
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, l1.Unlock(ctx))
	require.NoError(t, l2.Unlock(ctx))
}
