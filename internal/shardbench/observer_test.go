package shardbench

// The observer: who believes it owns which shard, moment by moment, and
// what follows from it — whether the group is balanced, the moves, the
// shard-seconds owned twice, and the believed intervals for the checker.

import (
	"slices"
	"sync"
	"time"

	"github.com/azlease/azlease/azleasetest"
)

type observer struct {
	mu        sync.Mutex
	shards    []string
	believers map[string]map[string]bool // shard → replicas that believe they own it
	last      map[string]string          // shard → the replica that last began to believe it
	since     map[string]time.Time       // shard → when its believers last changed
	live      map[string]bool            // replicas running and not stopped or crashed
	open      map[[2]string]azleasetest.Interval
	intervals map[string][]azleasetest.Interval // shard → ended intervals (azlease: with lease ID and epoch)

	event         time.Time     // zero until the scenario's event
	moves         int           // ownership changes from the event on
	twice         time.Duration // shard-time owned by two or more, from the event on
	balancedSince time.Time     // zero while not balanced
}

func newObserver(shards []string) *observer {
	o := &observer{
		shards: shards, believers: map[string]map[string]bool{}, last: map[string]string{},
		since: map[string]time.Time{}, live: map[string]bool{}, open: map[[2]string]azleasetest.Interval{},
		intervals: map[string][]azleasetest.Interval{},
	}
	for _, s := range shards {
		o.believers[s] = map[string]bool{}
	}
	return o
}

// begin records that replica believes it owns shard from now on. A move is
// a replica beginning to believe it owns a shard whose owner was another:
// its first believer, or one other than the last to begin, or the one left
// when the others stopped (a replica that takes back a shard it lost moves
// it again; one that ends and restarts its work does not).
func (o *observer) begin(replica, shard string, iv azleasetest.Interval) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := iv.Start
	o.settle(shard, now)
	o.believers[shard][replica] = true
	if o.last[shard] != replica && !o.event.IsZero() {
		o.moves++
	}
	o.last[shard] = replica
	iv.Holder = replica
	o.open[[2]string{replica, shard}] = iv
	o.check(now)
}

// end records that replica stopped believing it owns shard at end (no
// later than now).
func (o *observer) end(replica, shard string, end time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := [2]string{replica, shard}
	iv, ok := o.open[key]
	if !ok {
		return
	}
	delete(o.open, key)
	end = later(end, iv.Start)
	iv.End = end
	o.intervals[shard] = append(o.intervals[shard], iv)
	o.settle(shard, later(end, o.since[shard]))
	delete(o.believers[shard], replica)
	for r := range o.believers[shard] {
		if len(o.believers[shard]) == 1 {
			// The one left is the owner now, even if it never stopped
			// believing (a processor that took back a shard stolen from
			// it within one cycle).
			o.last[shard] = r
		}
	}
	o.check(time.Now())
}

// settle adds the time since the shard's believers last changed to the
// shard-time owned twice, if two or more believed it meanwhile.
func (o *observer) settle(shard string, now time.Time) {
	from := later(o.since[shard], o.event)
	if len(o.believers[shard]) >= 2 && !o.event.IsZero() && now.After(from) {
		o.twice += now.Sub(from)
	}
	o.since[shard] = now
}

// setLive marks a replica running (or not).
func (o *observer) setLive(replica string, live bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if live {
		o.live[replica] = true
	} else {
		delete(o.live, replica)
	}
	o.check(time.Now())
}

// markEvent starts counting moves and double ownership.
func (o *observer) markEvent(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.shards {
		o.settle(s, now)
	}
	o.event = now
	o.moves, o.twice = 0, 0
	o.check(now)
}

// check updates balancedSince: balanced means every shard believed by
// exactly one live replica, and each live replica believing floor or ceil
// of K / live of them.
func (o *observer) check(now time.Time) {
	if o.balanced() {
		if o.balancedSince.IsZero() {
			o.balancedSince = now
		}
	} else {
		o.balancedSince = time.Time{}
	}
}

func (o *observer) balanced() bool {
	n := len(o.live)
	if n == 0 {
		return false
	}
	count := map[string]int{}
	for _, s := range o.shards {
		liveBelievers := 0
		for r := range o.believers[s] {
			if o.live[r] {
				liveBelievers++
				count[r]++
			}
		}
		if liveBelievers != 1 {
			return false
		}
	}
	lo := len(o.shards) / n
	hi := lo
	if len(o.shards)%n != 0 {
		hi++
	}
	for r := range o.live {
		if c := count[r]; c < lo || c > hi {
			return false
		}
	}
	return true
}

// counts returns how many shards each live replica believes it owns.
func (o *observer) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := map[string]int{}
	for r := range o.live {
		c[r] = 0
	}
	for _, s := range o.shards {
		for r := range o.believers[s] {
			if o.live[r] {
				c[r]++
			}
		}
	}
	return c
}

// snapshot returns the figures so far.
func (o *observer) snapshot(now time.Time) (balancedSince time.Time, moves int, twice time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.shards {
		o.settle(s, now)
	}
	return o.balancedSince, o.moves, o.twice
}

// ended returns a shard's believed intervals, the open ones closed now.
func (o *observer) ended(shard string, now time.Time) []azleasetest.Interval {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := slices.Clone(o.intervals[shard])
	for k, iv := range o.open {
		if k[1] == shard {
			iv.End = now
			out = append(out, iv)
		}
	}
	return out
}

// minMoves is the fewest ownership changes that balance a group whose
// live replicas hold counts (replicas leaving are not among them; a
// replica joining is, with 0), with k shards in all: each replica keeps at
// most its target, and the ceil targets go to those that hold most.
func minMoves(k int, counts []int) int {
	n := len(counts)
	if n == 0 {
		return 0
	}
	c := slices.Clone(counts)
	slices.SortFunc(c, func(a, b int) int { return b - a })
	kept := 0
	for i, have := range c {
		target := k / n
		if i < k%n {
			target++
		}
		kept += min(have, target)
	}
	return k - kept
}

// later returns the later of two instants.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
