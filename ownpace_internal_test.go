package azlease

// A waiter's own pace (ownPace in fairlock.go): the epochs it saw pass
// between two of its listings, over the time between their sends.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestOwnPaceCountsEpochsBetweenListings(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	view := func(at time.Duration, epochs ...uint64) queueView {
		v := queueView{sent: t0.Add(at)}
		for _, e := range epochs {
			v.locks = append(v.locks, Status{Epoch: e})
		}
		return v
	}
	var o ownPace
	assert.Zero(t, o.saw(view(0, 100)), "one listing: unknown")
	assert.Equal(t, 10*time.Millisecond, o.saw(view(50*time.Millisecond, 105)), "5 terms in 50 ms")
	assert.Zero(t, o.saw(view(80*time.Millisecond, 105)), "no term since: the queue stands, its schedule governs")
	assert.Equal(t, 4*time.Millisecond, o.saw(view(100*time.Millisecond, 110)), "5 terms in 20 ms")
	assert.Zero(t, o.saw(view(120*time.Millisecond, 3)), "epochs that went back: a blob made anew")
	assert.Equal(t, 5*time.Millisecond, o.saw(view(140*time.Millisecond, 7)), "counted again from the new blob")
	assert.Zero(t, o.saw(view(200*time.Millisecond, 7+maxOwnPaceTerms+1)), "epochs that jumped")

	var s ownPace // a Semaphore: the slots' epochs summed
	s.saw(view(0, 10, 20))
	assert.Equal(t, 25*time.Millisecond, s.saw(view(100*time.Millisecond, 12, 22)), "4 terms over two slots in 100 ms")
}
