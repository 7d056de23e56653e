package timing

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func TestValidUntilMeasuresFromSend(t *testing.T) {
	assert.Equal(t, t0.Add(14250*time.Millisecond), ValidUntil(t0, 15*time.Second, 750*time.Millisecond))
}

func TestAttemptDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   time.Time
		timeout time.Duration
		want    time.Time
		ok      bool
	}{
		{"timeout first", t0.Add(10 * time.Second), 3 * time.Second, t0.Add(3 * time.Second), true},
		{"limit first", t0.Add(time.Second), 3 * time.Second, t0.Add(time.Second), true},
		{"too little left", t0.Add(MinAttempt - 1), 3 * time.Second, t0.Add(MinAttempt - 1), false},
		{"past", t0.Add(-time.Second), 3 * time.Second, t0.Add(-time.Second), false},
		{"exactly the minimum", t0.Add(MinAttempt), 3 * time.Second, t0.Add(MinAttempt), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := AttemptDeadline(t0, tc.limit, tc.timeout)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.ok, ok)
			assert.False(t, got.After(tc.limit), "an attempt never outlives the limit")
		})
	}
}

func TestBackoff(t *testing.T) {
	base, maxD := 100*time.Millisecond, 2*time.Second
	for _, tc := range []struct {
		n      int
		lo, hi time.Duration
	}{
		{0, 50 * time.Millisecond, 100 * time.Millisecond},
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{5, 800 * time.Millisecond, 1600 * time.Millisecond},
		{6, time.Second, 2 * time.Second},
		{1000, time.Second, 2 * time.Second},
	} {
		assert.Equal(t, tc.lo, Backoff(tc.n, base, maxD, 0), "n=%d", tc.n)
		assert.Less(t, Backoff(tc.n, base, maxD, 0.999999), tc.hi, "n=%d", tc.n)
	}
}

func TestJitter(t *testing.T) {
	assert.Equal(t, 8*time.Second, Jitter(10*time.Second, 0.2, 0))
	assert.Equal(t, 10*time.Second, Jitter(10*time.Second, 0.2, 0.5))
	assert.Equal(t, 10*time.Second, Jitter(10*time.Second, 0, 0.9))
}

// TestLargestValues: with the largest values the options allow (a 60 s
// lease, a 1 h poll interval with 0.5 jitter, a 24 h wait) nothing
// overflows, and Jitter saturates instead of going negative beyond them.
func TestLargestValues(t *testing.T) {
	hour := time.Hour
	assert.Equal(t, hour/2, Jitter(hour, 0.5, 0))
	assert.Greater(t, Jitter(hour, 0.5, 0.999999), hour*3/2-time.Second)
	assert.LessOrEqual(t, Jitter(hour, 0.5, 0.999999), hour*3/2)
	assert.Equal(t, time.Duration(math.MaxInt64), Jitter(math.MaxInt64, 0, 0.5), "no wrap to a negative wait")
	assert.Equal(t, time.Duration(math.MaxInt64), Jitter(math.MaxInt64, 0.5, 0.999999))
	assert.Equal(t, time.Duration(0), Jitter(-time.Second, 0, 0))
	assert.Equal(t, t0.Add(45*time.Second), ValidUntil(t0, 60*time.Second, 15*time.Second))
	d, ok := AttemptDeadline(t0, t0.Add(24*time.Hour), 15*time.Second)
	assert.True(t, ok)
	assert.Equal(t, t0.Add(15*time.Second), d)
	assert.Equal(t, 24*time.Hour, Sleep(t0, t0.Add(24*time.Hour), t0.Add(25*time.Hour)))
	assert.Equal(t, t0.Add(55*time.Second), RenewAt(t0, 55*time.Second))
	assert.Less(t, Backoff(math.MaxInt, 100*time.Millisecond, 2*time.Second, 0.999999), 2*time.Second)
}

func TestSleepAndOverslept(t *testing.T) {
	assert.Equal(t, 2*time.Second, Sleep(t0, t0.Add(2*time.Second), t0.Add(5*time.Second)))
	assert.Equal(t, time.Second, Sleep(t0, t0.Add(2*time.Second), t0.Add(time.Second)))
	assert.Equal(t, time.Duration(0), Sleep(t0, t0.Add(-time.Second), t0.Add(time.Second)))

	late, past := Overslept(t0, t0.Add(20*time.Second), t0.Add(9*time.Second))
	assert.Equal(t, 20*time.Second, late)
	assert.True(t, past)
	late, past = Overslept(t0, t0.Add(time.Millisecond), t0.Add(9*time.Second))
	assert.Equal(t, time.Millisecond, late)
	assert.False(t, past)
}

func TestToleratedRateRatio(t *testing.T) {
	assert.InDelta(t, 1.0526, ToleratedRateRatio(15*time.Second, 750*time.Millisecond), 0.0001)
	assert.Equal(t, RenewAt(t0, 5*time.Second), t0.Add(5*time.Second))
}

func TestRenewJitter(t *testing.T) {
	const every = 5 * time.Second
	assert.Equal(t, t0.Add(every), FirstRenewAt(t0, every, 0))
	assert.Equal(t, t0.Add(every/2), FirstRenewAt(t0, every, 1))
	assert.Equal(t, t0.Add(every*3/4), FirstRenewAt(t0, every, 0.5))
	assert.Equal(t, t0.Add(every), NextRenewAt(t0, every, 0))
	assert.Equal(t, t0.Add(4500*time.Millisecond), NextRenewAt(t0, every, 1))
	for _, rnd := range []float64{-1, 0, 0.3, 0.999999, 2, math.NaN()} {
		first, next := FirstRenewAt(t0, every, rnd), NextRenewAt(t0, every, rnd)
		assert.False(t, first.After(RenewAt(t0, every)), "never later than the interval")
		assert.False(t, first.Before(t0.Add(every/2)))
		assert.False(t, next.After(RenewAt(t0, every)))
		assert.False(t, next.Before(t0.Add(every*9/10)))
	}
}

func TestMaxJittered(t *testing.T) {
	for _, frac := range []float64{0, 0.1, 0.2, 0.5} {
		max := MaxJittered(5*time.Second, frac)
		for _, rnd := range []float64{0, 0.25, 0.5, 0.999999} {
			if j := Jitter(5*time.Second, frac, rnd); j > max {
				t.Fatalf("Jitter(5s, %v, %v) = %v > MaxJittered %v", frac, rnd, j, max)
			}
		}
	}
	if got := MaxJittered(5*time.Second, 0.2); got != 6*time.Second {
		t.Fatalf("MaxJittered(5s, 0.2) = %v, want 6s", got)
	}
}

// TestQueueWait: right after a move a waiter looks every position × head
// (head right behind the first); in a queue that stands still, every half
// the time since it moved, and once it has been quiet for 30 × poll, every
// age × (position − 1)/2, so that the further back, the sooner it slows
// down; never less often than QueueCap, which every position reaches
// within 60 × poll; and the total rate behind the first of 50 waiters is
// under one request a second a minute after the queue last moved.
func TestQueueWait(t *testing.T) {
	head, poll := 200*time.Millisecond, time.Second
	assert.Equal(t, 30*time.Second, QueueQuiet(poll))
	for _, c := range []struct {
		p    int
		age  time.Duration
		want time.Duration
	}{
		{1, 0, head},
		{1, 300 * time.Millisecond, head},
		{1, time.Second, 500 * time.Millisecond},
		{1, 3 * time.Second, 1500 * time.Millisecond},
		{1, time.Hour, 2 * time.Second},
		{2, 0, 2 * head},
		{2, 10 * time.Second, 5 * time.Second},
		{2, 40 * time.Second, 20 * time.Second},
		{2, time.Minute, 30 * time.Second},
		{3, 0, 3 * head},
		{3, 10 * time.Second, 5 * time.Second},
		{3, 40 * time.Second, 40 * time.Second},
		{49, 0, 49 * head},
		{49, time.Second, 49 * head},
		{49, 20 * time.Second, 10 * time.Second},
		{49, 31 * time.Second, 150 * time.Second},
		{100000, 1000 * time.Hour, 100000 * head},     // the floor above the cap; no overflow
		{10000000, 1000 * time.Hour, 10000000 * head}, // nor here
	} {
		assert.Equal(t, c.want, QueueWait(c.p, c.age, head, poll), "p=%d age=%v", c.p, c.age)
	}
	for p := 1; p <= 60; p++ {
		assert.Equal(t, max(QueueCap(p, poll), time.Duration(p)*head), QueueWait(p, 60*poll, head, poll), "p=%d at 60 × poll", p)
	}
	rate := 0.0
	for p := 1; p < 50; p++ {
		rate += 1 / QueueWait(p, time.Minute, head, poll).Seconds()
	}
	assert.Less(t, rate, 1.0, "requests/s behind the first of 50, a minute after the queue moved")
}

func TestSecondWait(t *testing.T) {
	head, poll, margin := 200*time.Millisecond, time.Second, 50*time.Millisecond
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	at := func(n int) time.Time { return t0.Add(ms(n)) }
	var none time.Time
	assert.Equal(t, 2*time.Second, SecondCover(head))
	for _, tc := range []struct {
		name                   string
		now, moved, looked, hf time.Time
		want                   time.Duration
		fast                   bool
	}{
		{"a hand-off to another just seen: fast", at(1000), at(0), at(1000), at(1000), head / 4, true},
		{"still fast just before 2 head polls + margin", at(1449), at(0), at(1440), at(1000), head / 4, true},
		{"no longer fast after that", at(1450), at(0), at(1440), at(1000), head - ms(10), false},
		{"right after a move, counted from the last look", at(300), at(0), at(150), none, head - ms(150), false},
		{"a look overdue: at once", at(300), at(0), at(0), none, 0, false},
		{"never looked: a head poll", at(300), at(0), none, none, head, false},
		{"just before 10 head polls since the move: still every head poll", at(1999), at(0), at(1900), none, ms(101), false},
		{"after that: SecondLook, from now", at(2000), at(0), at(1900), none, SecondLook(ms(2000), head, poll, false), false},
		{"a hand-off long after the move: fast too", at(60000), at(0), at(59000), at(60000), head / 4, true},
		{"and after its 2 head polls + margin, QueueWait", at(60450), at(0), at(60400), at(60000), 2 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, fast := SecondWait(tc.now, tc.moved, tc.looked, tc.hf, head, poll, margin, false)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.fast, fast)
		})
	}
}

// TestSecondLook: right behind the first, past SecondCover, a waiter looks
// every age/2 up to 2 × poll, then every age/150 from 300 × poll of
// stand-still, up to SecondCap (4 × poll) from 600 × poll; a marked one
// stays at 2 × poll. It never decreases as the stand-still grows, and never
// exceeds what an older watcher allows (QueueWait(1, …) with OlderPoll).
func TestSecondLook(t *testing.T) {
	head, poll := 200*time.Millisecond, time.Second
	for _, tc := range []struct {
		age          time.Duration
		want, marked time.Duration
	}{
		{2 * time.Second, time.Second, time.Second},
		{4 * time.Second, 2 * time.Second, 2 * time.Second},
		{100 * time.Second, 2 * time.Second, 2 * time.Second},
		{5 * time.Minute, 2 * time.Second, 2 * time.Second},
		{450 * time.Second, 3 * time.Second, 2 * time.Second},
		{10 * time.Minute, 4 * time.Second, 2 * time.Second},
		{100 * time.Hour, 4 * time.Second, 2 * time.Second},
	} {
		assert.Equal(t, tc.want, SecondLook(tc.age, head, poll, false), "age %v", tc.age)
		assert.Equal(t, tc.marked, SecondLook(tc.age, head, poll, true), "age %v, marked", tc.age)
	}
	assert.Equal(t, 4*poll, SecondCap(poll))
	// A free slot waits for an unmarked first as long as it may sleep there.
	margin := 50 * time.Millisecond
	assert.Equal(t, 2*head+margin+2*poll, PassOverFree(head, poll, margin, false, 0))
	assert.Equal(t, 2*head+margin+2*poll, PassOverFree(head, poll, margin, false, 5*time.Minute))
	assert.Equal(t, 2*head+margin+4*poll, PassOverFree(head, poll, margin, false, 10*time.Minute))
	assert.Equal(t, 2*head+margin+4*poll, PassOverFree(head, poll, margin, false, 1<<63-1), "unknown")
	assert.Equal(t, head+2*poll+margin, PassOverFree(head, poll, margin, true, 10*time.Minute), "marked")
	for a := time.Duration(0); a < 2*time.Hour; a += 700 * time.Millisecond {
		assert.LessOrEqual(t, SecondLook(a, head, poll, false), SecondLook(a+700*time.Millisecond, head, poll, false), "age %v", a)
		assert.LessOrEqual(t, SecondLook(a, head, poll, false), QueueWait(1, a, head, OlderPoll(poll)), "age %v: an older watcher allows it", a)
	}
}
