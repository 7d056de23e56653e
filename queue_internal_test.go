package azlease

// The fair lock queue's missed mark, settled before it is reported: a mark
// whose answer was lost must never be applied after miss said it was not
// made.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
)

// TestMissSettledBeforeReported: every attempt of a missed mark reaches
// storage only after its writer gave up on it (ApplyLate). miss reads the
// entry, finds it as listed, and writes it as it is, conditional on the
// same ETag, before it reports the mark not made: the attempts still on
// their way are then refused. Without that write, the waiter (looking all
// along, as far as anyone knows) would be marked missed seconds later, and
// passed over once.
func TestMissSettledBeforeReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, cc := schedEmu(t)
		ctx := context.Background()
		m, err := NewMutex(cc, "m", nil)
		require.NoError(t, err)
		q := m.fair.q
		limit := time.Now().Add(time.Minute)
		ticket, err := q.take(ctx, limit)
		require.NoError(t, err)
		w, err := q.join(ctx, limit, ticket, newLeaseID(), "first", m.cfg.headPoll, m.cfg.poll)
		require.NoError(t, err)

		const lateBy = 10 * time.Second
		marks := 0
		s.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpSetMetadata && r.Header.Get("X-Ms-Meta-"+metaWaiterMissed) != "" {
				marks++
				return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: lateBy}
			}
			return azleasetest.Fault{}
		})
		marked, _, changed := q.miss(ctx, w)
		require.Positive(t, marks, "the mark was sent")
		assert.False(t, marked, "no attempt of the mark was applied by the time miss returned")
		assert.False(t, changed, "the entry is as listed (rewritten as it was)")

		time.Sleep(2 * lateBy)
		synctest.Wait()
		s.SetFaults(nil)
		ws, err := q.waiters(ctx, time.Now().Add(time.Minute))
		require.NoError(t, err)
		require.Len(t, ws, 1)
		assert.False(t, ws[0].Missed, "a mark reported as not made was applied later")
		assert.Equal(t, w.id, ws[0].id, "the entry kept what it said")
		assert.Equal(t, w.Holder, ws[0].Holder)
		assert.Equal(t, w.Since, ws[0].Since)
	})
}
