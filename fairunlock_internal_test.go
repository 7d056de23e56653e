package azlease

// Unlock's reuse of the listing that made its caller first in line
// (unlockFair, reuseListing): only a recent one, with nobody ahead and
// nobody marked missed, decides the successor without a listing.

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnlockReusesOnlyARecentCleanListing: a holds the lock as if served
// from the queue (ticket 0), b and c wait behind it. Its listing is
// doctored to leave b out, or to show b marked missed: a listing older than
// reuseAge (reuseListing and 8 of its round trips), or one that shows
// someone marked missed, is not used (a
// fresh listing hands the lock to b); a recent, clean one is (the doctored
// listing hands it to c, which shows that it decided).
func TestUnlockReusesOnlyARecentCleanListing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(v *queueView, b uint64)
		first string
	}{
		{"older than reuseListing", func(v *queueView, b uint64) {
			v.ws = slices.DeleteFunc(v.ws, func(w waiter) bool { return w.Ticket == b })
			v.sent, v.got = v.sent.Add(-reuseListing-10*time.Millisecond), v.got.Add(-reuseListing-10*time.Millisecond)
		}, "b"},
		{"older than reuseListing and its 8 round trips", func(v *queueView, b uint64) {
			v.ws = slices.DeleteFunc(v.ws, func(w waiter) bool { return w.Ticket == b })
			v.sent, v.got = v.sent.Add(-reuseListing-90*time.Millisecond), v.got.Add(-reuseListing-80*time.Millisecond)
		}, "b"},
		{"older than reuseListing, within its 8 round trips", func(v *queueView, b uint64) {
			v.ws = slices.DeleteFunc(v.ws, func(w waiter) bool { return w.Ticket == b })
			v.sent, v.got = v.sent.Add(-reuseListing-70*time.Millisecond), v.got.Add(-reuseListing-60*time.Millisecond)
		}, "c"},
		{"someone marked missed", func(v *queueView, b uint64) {
			for i := range v.ws {
				if v.ws[i].Ticket == b {
					v.ws[i].Missed = true
				}
			}
		}, "b"},
		{"recent and clean", func(v *queueView, b uint64) {
			v.ws = slices.DeleteFunc(v.ws, func(w waiter) bool { return w.Ticket == b })
		}, "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, cc := schedEmu(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				mutex := func() *Mutex { return mutexOn(t, cc) }
				a := mutex()
				lk, err := a.Lock(ctx)
				require.NoError(t, err)
				served := make(chan string, 2)
				for _, who := range []string{"b", "c"} {
					m := mutex()
					go func() {
						l, err := m.Lock(ctx)
						if err == nil {
							served <- who
							_ = l.Unlock(context.Background())
						}
					}()
					time.Sleep(time.Second) // b joins before c
				}
				v, err := a.fair.q.list(ctx, time.Now().Add(time.Minute))
				require.NoError(t, err)
				require.Len(t, v.ws, 2)
				tc.edit(&v, v.ws[0].Ticket)
				v.sent = v.sent.Add(-time.Millisecond)
				lk.fair = &fairState{f: a.fair, key: "held", ticket: 0, took: time.Now(), seen: v}
				require.NoError(t, lk.Unlock(ctx))
				assert.Equal(t, tc.first, <-served)
				assert.NotEmpty(t, <-served)
			})
		})
	}
}

// mutexOn is a fair Mutex on the lock blob "m" in cc, with the defaults.
func mutexOn(t *testing.T, cc *container.Client) *Mutex {
	t.Helper()
	m, err := NewMutex(cc, "m", nil)
	require.NoError(t, err)
	return m
}
