package main

// The dead-waiters scenario (issue 35): W waiters (50) queue behind a
// holder; then two of them die (their processes are killed) and one is cut
// off from the service for 8 s and comes back, at places far apart in the
// queue (a fifth, two fifths and seven tenths of the way back), and the
// holder unlocks. Each waiter, once served, holds for a moment and leaves.
// What a victim costs: the time the hand-offs that had to pass it over
// (or wait for it) took beyond an ordinary hand-off of the same run, per
// victim. The baseline is the same queue with no victim.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Variants of the dead-waiters scenario.
const (
	queueAlive = "none" // no victim: the baseline
	queueDead  = "dead" // two killed, one cut off for params.deadCut
)

// queueVariants are the dead-waiters scenario's variants, in table order.
var queueVariants = []string{queueAlive, queueDead}

// victims returns the queue places (0-based, in asking order) of the two
// waiters that die and of the one cut off, in a queue of w (at least 5).
func victims(w int) (dead []int, cut int) {
	return []int{w / 5, 7 * w / 10}, 2 * w / 5
}

// queueAcq is one acquisition of the dead-waiters scenario: the waiter (its
// place in asking order; -1 the first holder), and when its Unlock was
// called (zero: not yet, or the last).
type queueAcq struct {
	who         int
	got, called time.Time
}

// deadQueueRun is one repetition of the dead-waiters scenario.
type deadQueueRun struct {
	waiters   int
	gaps      []time.Duration // every hand-off's, Unlock call → next Lock returned
	ordinary  time.Duration   // the median gap of the hand-offs that passed no victim
	costs     []time.Duration // per hand-off that passed over or waited for a victim: its gap beyond ordinary
	perVictim time.Duration   // the sum of costs over the number of victims
	drain     time.Duration   // from the first Unlock call to the last waiter served
	overtakes int             // pairs of waiters that were never victims served out of asking order
}

// attributeVictims splits the hand-offs of acqs (in the order they
// happened) into ordinary ones and those that passed over a victim not
// served yet (the next holder is further back than it; once per victim) or
// went to a victim;
// it returns the median ordinary gap and each other hand-off's gap beyond
// it. A hand-off to a victim counts from when it could reach storage again
// (back, when later than the Unlock call: a waiter cut off until after the
// queue drained is served when it is back, and its own cut is not the
// others' cost).
func attributeVictims(acqs []queueAcq, isVictim func(int) bool, back map[int]time.Time) (ordinary time.Duration, costs []time.Duration) {
	served, skipped := map[int]bool{}, map[int]bool{} // skipped: passed over once already
	var plain, special []time.Duration
	for k := 0; k+1 < len(acqs); k++ {
		served[acqs[k].who] = true
		if acqs[k].called.IsZero() {
			continue
		}
		from, to := acqs[k].who, acqs[k+1].who
		gap := acqs[k+1].got.Sub(acqs[k].called)
		passed := false
		for v := from + 1; v < to; v++ {
			if isVictim(v) && !served[v] && !skipped[v] {
				passed, skipped[v] = true, true
			}
		}
		if b, ok := back[to]; ok && isVictim(to) && b.After(acqs[k].called) {
			gap = acqs[k+1].got.Sub(b)
		}
		if passed || isVictim(to) {
			special = append(special, gap)
			continue
		}
		plain = append(plain, gap)
	}
	ordinary = quantile(plain, 0.5)
	for _, g := range special {
		costs = append(costs, g-ordinary)
	}
	return ordinary, costs
}

// runDeadQueue: see the top of this file; variant is queueAlive or
// queueDead.
func runDeadQueue(ctx context.Context, be backend, name, variant string, p params) (deadQueueRun, error) {
	w := p.deadWaiters
	ctx, cancel := context.WithTimeout(ctx, time.Duration(w)*p.deadSpacing+2*p.etcdTTL+4*time.Minute)
	defer cancel()
	ws, closeAll, err := newWaiters(ctx, be, name, w+1)
	if err != nil {
		return deadQueueRun{}, err
	}
	defer closeAll()
	holder, ws := ws[0], ws[1:]
	dead, cut := victims(w)
	isVictim := func(i int) bool { return variant == queueDead && (i == cut || slices.Contains(dead, i)) }
	isDead := func(i int) bool { return variant == queueDead && slices.Contains(dead, i) }

	var x exclusion
	unlockHolder, err := holder.Lock(ctx)
	if err != nil {
		return deadQueueRun{}, fmt.Errorf("holder: %w", err)
	}
	x.enter()
	var (
		mu   sync.Mutex
		acqs = []queueAcq{{who: -1, got: time.Now()}}
		errs = make([]error, w+1)
		wg   sync.WaitGroup
	)
	start := time.Now()
	for i := range w {
		wg.Go(func() {
			if errs[i] = sleepCtx(ctx, time.Until(start.Add(time.Duration(i)*p.deadSpacing))); errs[i] != nil {
				return
			}
			unlock, err := ws[i].Lock(ctx)
			if err != nil {
				if !isDead(i) {
					errs[i] = fmt.Errorf("waiter %d: %w", i, err)
				}
				return
			}
			if isDead(i) {
				_ = unlock(ctx)
				errs[i] = fmt.Errorf("waiter %d got the lock after it died", i)
				return
			}
			x.enter()
			mu.Lock()
			k := len(acqs)
			acqs = append(acqs, queueAcq{who: i, got: time.Now()})
			mu.Unlock()
			_ = sleepCtx(ctx, p.deadHold)
			x.leave()
			mu.Lock()
			acqs[k].called = time.Now()
			mu.Unlock()
			if err := unlock(ctx); err != nil {
				errs[i] = fmt.Errorf("waiter %d: unlock: %w", i, err)
			}
		})
	}
	// Every waiter has asked, and has had a second to join.
	_ = sleepCtx(ctx, time.Until(start.Add(time.Duration(w)*p.deadSpacing+time.Second)))
	back := map[int]time.Time{}
	if variant == queueDead {
		for _, i := range dead {
			ws[i].crash()
		}
		ws[cut].cut(p.deadCut)
		back[cut] = time.Now().Add(p.deadCut)
		tracef("victims: %v killed, %d cut off", dead, cut)
	}
	_ = sleepCtx(ctx, p.deadSpacing)
	x.leave()
	mu.Lock()
	acqs[0].called = time.Now()
	mu.Unlock()
	if err := unlockHolder(ctx); err != nil {
		errs[w] = fmt.Errorf("holder: unlock: %w", err)
	}
	wg.Wait()
	if err := errors.Join(append(errs, x.err(), ctx.Err())...); err != nil {
		return deadQueueRun{}, err
	}
	run := deadQueueRun{waiters: w, drain: acqs[len(acqs)-1].got.Sub(acqs[0].called)}
	for k := 0; k+1 < len(acqs); k++ {
		run.gaps = append(run.gaps, acqs[k+1].got.Sub(acqs[k].called))
	}
	run.ordinary, run.costs = attributeVictims(acqs, isVictim, back)
	if variant == queueDead {
		var sum time.Duration
		for _, c := range run.costs {
			sum += c
		}
		run.perVictim = sum / time.Duration(len(dead)+1)
	}
	var order []int
	for _, a := range acqs[1:] {
		if !isVictim(a.who) {
			order = append(order, a.who)
		}
	}
	run.overtakes = orderRun{served: order}.overtakes()
	return run, nil
}
