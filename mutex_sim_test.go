package azlease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// mutexScenario is one seed's world for the Mutex simulation: clients that
// loop Lock, work, Unlock, pause, under the Elector simulation's fault mix,
// with clients cut off from storage, operator breaks and a bad period.
type mutexScenario struct {
	seed      uint64
	clients   int
	faultRate float64
	clockRate float64
	opts      azlease.MutexOptions
	events    []event // crash (a client cut off for dur), outage, break
	length    time.Duration
	badStart  time.Duration
	badLen    time.Duration
	// handoff adds two holders that use Lease directly and pass the lease
	// to each other with HandOff (Change Lease) instead of releasing it.
	handoff bool
}

func newMutexScenario(seed uint64) mutexScenario {
	rng := rand.New(rand.NewPCG(seed, 0x307e))
	sc := mutexScenario{
		seed:      seed,
		clients:   2 + rng.IntN(4),
		faultRate: rng.Float64() * 0.3,
		clockRate: []float64{1, 1, 1.01, 0.99, 1.04}[rng.IntN(5)],
		length:    10 * time.Minute,
	}
	sc.opts.LeaseDuration = time.Duration([]int{15, 15, 20, 30}[rng.IntN(4)]) * time.Second
	sc.opts.PollInterval = time.Duration([]int{1, 1, 2, 5}[rng.IntN(4)]) * time.Second
	for at := 30 * time.Second; at < sc.length-time.Minute; at += time.Duration(20+rng.IntN(40)) * time.Second {
		kind := []string{"crash", "crash", "outage"}[rng.IntN(3)]
		sc.events = append(sc.events, event{at: at, kind: kind, node: rng.IntN(sc.clients), dur: time.Duration(1+rng.IntN(40)) * time.Second})
	}
	sc.events, sc.badStart, sc.badLen = addOperatorTrouble(rng, sc.events, sc.length, sc.opts.LeaseDuration)
	sc.handoff = rng.IntN(2) == 0
	return sc
}

func (sc mutexScenario) String() string {
	bad := "none"
	if sc.badLen > 0 {
		bad = fmt.Sprintf("%v+%v", sc.badStart, sc.badLen)
	}
	return fmt.Sprintf("seed %d: %d clients, faults %.0f%%, server clock ×%.2f, lease %v, poll %v, %d events, bad period %s, hand-off pair %v",
		sc.seed, sc.clients, sc.faultRate*100, sc.clockRate, sc.opts.LeaseDuration, sc.opts.PollInterval, len(sc.events), bad, sc.handoff)
}

// mutexStats is what one run of a mutex scenario measured.
type mutexStats struct {
	locks     int // Locks taken
	lost      int // Locks whose context ended before the holder was done
	gaveUp    int // Lock calls that returned an error
	outside   int // held intervals outside their lease
	overlaps  int // pairs of overlapping held intervals
	epochs    int // locks whose epoch did not grow over an earlier one's
	requests  int
	late      map[azleasetest.Op]int
	work      workStats
	breaks    int
	unlockErr int // Unlocks that returned an error
	handoffs  int // HandOffs that succeeded
	handFails int // HandOffs that failed (may or may not have happened)
}

func (s *mutexStats) add(o mutexStats) {
	s.locks += o.locks
	s.lost += o.lost
	s.gaveUp += o.gaveUp
	s.outside += o.outside
	s.overlaps += o.overlaps
	s.epochs += o.epochs
	s.requests += o.requests
	if s.late == nil {
		s.late = map[azleasetest.Op]int{}
	}
	for k, v := range o.late {
		s.late[k] += v
	}
	s.work.add(o.work)
	s.breaks += o.breaks
	s.unlockErr += o.unlockErr
	s.handoffs += o.handoffs
	s.handFails += o.handFails
}

// runMutexScenario plays sc. It must run inside a synctest bubble.
func runMutexScenario(t *testing.T, sc mutexScenario) mutexStats {
	c := newCluster(t, azlease.ElectorOptions{})
	c.work = &workCounter{}
	c.emu.SetClockRate(sc.clockRate)
	mix := newFaultMix(sc.seed, sc.faultRate, sc.opts.LeaseDuration, false)
	t0 := time.Now()
	if sc.badLen > 0 {
		mix.bad = badPeriod(mix, t0.Add(sc.badStart), t0.Add(sc.badStart+sc.badLen))
	}
	var outage atomic.Bool
	c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
		if outage.Load() {
			return azleasetest.Fault{Action: azleasetest.Fail}
		}
		return mix.draw(r)
	})

	var st mutexStats
	var smu sync.Mutex
	var clients sync.WaitGroup
	for i := range sc.clients {
		name := fmt.Sprintf("m%d", i)
		o := sc.opts
		o.Identity = name
		m, err := azlease.NewMutex(c.emu.client(name), c.blob, &o)
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(sc.seed, uint64(i)))
		clients.Go(func() {
			for time.Since(t0) < sc.length {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				lk, err := m.Lock(ctx)
				cancel()
				if err != nil {
					smu.Lock()
					st.gaveUp++
					smu.Unlock()
					time.Sleep(time.Duration(rng.IntN(5000)) * time.Millisecond)
					continue
				}
				b := believed{node: name, epoch: lk.Epoch(), leaseID: lk.Token().LeaseID, start: time.Now()}
				// Work for up to longer than the lease, through the lock's
				// term, stopping when its context ends.
				wctx, cancel := context.WithTimeout(lk.Context(), time.Duration(rng.IntN(int(2*sc.opts.LeaseDuration/time.Millisecond)))*time.Millisecond)
				c.work.run(wctx, lk.Term, name)
				cancel()
				b.end = time.Now()
				if vu := lk.ValidUntil(); vu.Before(b.end) {
					b.end = vu
				}
				lost := lk.Context().Err() != nil
				b.cause = context.Cause(lk.Context())
				c.record(b)
				uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				uerr := lk.Unlock(uctx)
				cancel()
				smu.Lock()
				st.locks++
				if lost {
					st.lost++
				}
				if uerr != nil {
					st.unlockErr++
				}
				smu.Unlock()
				time.Sleep(time.Duration(rng.IntN(5000)) * time.Millisecond)
			}
		})
	}

	if sc.handoff {
		clients.Go(func() { handOffPair(t, c, sc, t0, &st, &smu) })
	}

	var pending sync.WaitGroup
	for _, ev := range sc.events {
		time.Sleep(time.Until(t0.Add(ev.at)))
		switch ev.kind {
		case "crash":
			name := fmt.Sprintf("m%d", ev.node)
			how := azleasetest.Hang
			if ev.dur%2 == 0 {
				how = azleasetest.Drop
			}
			c.partition(name, how)
			pending.Go(func() {
				time.Sleep(ev.dur)
				c.heal(name)
			})
		case "outage":
			outage.Store(true)
			time.Sleep(min(ev.dur, 10*time.Second))
			outage.Store(false)
		case "break":
			st.breaks++
			c.operatorBreak(sc.opts.LeaseDuration, ev.dur, &pending)
		}
	}
	pending.Wait()
	clients.Wait()
	c.stopAll()

	mix.mu.Lock()
	st.requests = mix.requests
	st.late = mix.late
	faultLog := mix.log
	mix.mu.Unlock()
	st.work = c.work.snapshot()
	var checkErr error
	st.outside, st.overlaps, st.epochs, checkErr = c.violations()
	if debugSim && (checkErr != nil || st.work.stale > 0) {
		t.Logf("%v: faults injected:\n%s", sc, strings.Join(faultLog, "\n"))
		t.Logf("%v: %v", sc, checkErr)
	}
	return st
}

// mutexSeeds is how many seeds the Mutex simulation runs: -seeds, else a
// tenth of simSeeds (make test: 20), to keep make test's cost modest; each
// seed keeps every client busy for its whole length.
func mutexSeeds() int { return partSeeds(10, 10) }

// TestMutexSafetySimulation plays random scenarios in fake time: two to five
// clients loop Lock, work through the lock's term (fenced writes, metadata
// writes, reads), Unlock and pause, while requests fail, are slow, lose their
// answers or are applied late, clients are cut off from storage, storage
// has outages and an operator breaks the lease. The checker asserts that no
// two held locks overlap, that none lies outside the emulator's true grants
// for its lease ID, that epochs grow from lock to lock, and that no read is
// stale.
func TestMutexSafetySimulation(t *testing.T) {
	n := mutexSeeds()
	var total mutexStats
	simulation[mutexScenario, mutexStats]{
		seeds:    n,
		scenario: newMutexScenario,
		play:     runMutexScenario,
		check: func(t *testing.T, sc mutexScenario, st mutexStats) {
			if st.outside+st.overlaps+st.epochs+st.work.stale > 0 {
				t.Errorf("%v: %d locks outside their lease, %d overlapping pairs, %d epochs that did not grow, %d stale reads", sc, st.outside, st.overlaps, st.epochs, st.work.stale)
			}
		},
		add: func(_ mutexScenario, st mutexStats) { total.add(st) },
	}.run(t)
	t.Logf("%d seeds: %d locks (%d lost while held, %d Lock calls gave up, %d Unlocks failed), %d hand-offs (%d failed), %d held intervals outside their lease, %d overlapping pairs, %d epochs that did not grow; %d requests, applied late %v; %d operator breaks; work: %v",
		n, total.locks, total.lost, total.gaveUp, total.unlockErr, total.handoffs, total.handFails, total.outside, total.overlaps, total.epochs, total.requests, total.late, total.breaks, total.work)
}

// handOffPair runs two holders, h0 and h1, that use Lease directly: each in
// turn acquires the lease (competing with the Mutex clients), holds it for
// up to half its validity, and hands it to the other's next lease ID, which
// the other then acquires. Each holding is recorded for the checker, from
// Acquire's return to the earlier of the hand-off and its validity deadline.
func handOffPair(t *testing.T, c *cluster, sc mutexScenario, t0 time.Time, st *mutexStats, smu *sync.Mutex) {
	var ls [2]*azlease.Lease
	for i := range ls {
		var err error
		ls[i], err = azlease.NewLease(c.emu.client(fmt.Sprintf("h%d", i)), c.blob, &azlease.LeaseOptions{LeaseDuration: sc.opts.LeaseDuration, Identity: fmt.Sprintf("h%d", i)})
		require.NoError(t, err)
	}
	rng := rand.New(rand.NewPCG(sc.seed, 0x4a4d))
	for cur := 0; time.Since(t0) < sc.length; {
		l := ls[cur]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		tok, err := l.Acquire(ctx)
		cancel()
		if err != nil {
			time.Sleep(time.Duration(500+rng.IntN(4500)) * time.Millisecond)
			cur = rng.IntN(2)
			continue
		}
		b := believed{node: fmt.Sprintf("h%d", cur), epoch: tok.Epoch, leaseID: tok.LeaseID, start: time.Now()}
		time.Sleep(time.Duration(rng.Int64N(int64(sc.opts.LeaseDuration / 2))))
		b.end = time.Now()
		if vu := l.ValidUntil(); vu.Before(b.end) {
			b.end = vu
		}
		c.record(b)
		next := ls[1-cur].NextLeaseID()
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = l.HandOff(ctx, next)
		cancel()
		smu.Lock()
		if err == nil {
			st.handoffs++
		} else {
			st.handFails++
		}
		smu.Unlock()
		cur = 1 - cur
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range ls {
		_ = l.Release(ctx)
	}
}
