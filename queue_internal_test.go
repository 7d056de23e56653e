package azlease

// The fair lock queue's missed mark, settled before it is reported: a mark
// whose answer was lost must never be applied after miss said it was not
// made.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/timing"
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

// TestTicketGenerationsTurn: with generations turned every 3 appends,
// waiters taking tickets one after another and eight at once get distinct
// tickets, each generation's below the next's (one at a time: without a
// failed request); the waiter whose append lands at the turn creates the
// next generation and deletes an old one, so at most keptGenerations + 1
// are left. TestTicketGenerationMadeAgain: a joiner held up past
// keptGenerations.
func TestTicketGenerationsTurn(t *testing.T) {
	defer func(r uint64) { rotateAt = r }(rotateAt)
	rotateAt = 3
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.New(nil)
		t.Cleanup(s.Close)
		plain, err := s.ContainerClient("locks", "a")
		require.NoError(t, err)
		cred, err := container.NewSharedKeyCredential(azleasetest.Account, azleasetest.AccountKey)
		require.NoError(t, err)
		var failed failedRequests
		cc, err := container.NewClientWithSharedKeyCredential(plain.URL(), cred, &container.ClientOptions{
			ClientOptions: azcore.ClientOptions{Transport: &failed, Retry: policy.RetryOptions{MaxRetries: -1}},
		})
		require.NoError(t, err)
		failed.next = s.Transport("a")
		ctx := context.Background()
		_, err = plain.Create(ctx, nil)
		require.NoError(t, err)
		m, err := NewMutex(cc, "m", nil)
		require.NoError(t, err)
		q := m.fair.q
		limit := time.Now().Add(time.Minute)
		var prev uint64
		for i := range 10 {
			tk, err := q.take(ctx, limit)
			require.NoError(t, err)
			assert.Greater(t, tk, prev, "ticket %d", i)
			prev = tk
		}
		assert.Equal(t, uint64(3*ticketsPerGeneration+1), prev, "three generations turned: 3 tickets each, the tenth the fourth generation's first")
		failed.mu.Lock()
		assert.Empty(t, failed.list, "failed requests, one waiter at a time")
		failed.list = nil
		failed.mu.Unlock()
		var mu sync.Mutex
		seen := map[uint64]bool{}
		var wg sync.WaitGroup
		const together = 8 // fewer turns than keptGenerations: no joiner is held up past it
		for range together {
			wg.Go(func() {
				tk, err := q.take(ctx, limit)
				assert.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				assert.False(t, seen[tk], "ticket %d given twice", tk)
				assert.Greater(t, tk, prev)
				seen[tk] = true
			})
		}
		wg.Wait()
		assert.Len(t, seen, together)
		sts, err := InspectPrefix(ctx, cc, QueueName("m"))
		require.NoError(t, err)
		gens := 0
		for _, st := range sts {
			if _, ok := st.QueueCounter(); ok {
				gens++
			}
		}
		assert.LessOrEqual(t, gens, keptGenerations+1, "older generations deleted")
		// Eight at once across generations of 3 (of 40,000 in use): a
		// waiter may create a generation another created first; never a
		// ticket twice.
		for _, f := range failed.list {
			assert.Contains(t, f, "/m/queue/tickets-", "only the tickets blobs' races fail")
		}
	})
}

// queueEmu returns an emulator, a client of it, and the queue of a Mutex
// named m on it.
func queueEmu(t *testing.T) (*azleasetest.Server, *container.Client, *queue) {
	t.Helper()
	s, cc := schedEmu(t)
	m, err := NewMutex(cc, "m", nil)
	require.NoError(t, err)
	return s, cc, m.fair.q
}

// failedRequests is a transport that keeps the failed answers.
type failedRequests struct {
	next policy.Transporter
	mu   sync.Mutex
	list []string
}

func (f *failedRequests) Do(req *http.Request) (*http.Response, error) {
	resp, err := f.next.Do(req)
	if err == nil && resp.StatusCode >= 400 {
		f.mu.Lock()
		f.list = append(f.list, fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, resp.StatusCode))
		f.mu.Unlock()
	}
	return resp, err
}

// FuzzTicketsName: a listed name is a tickets blob of the lock's queue
// (parseTickets, Status.QueueCounter) only if it is exactly the name that
// generation's blob has, and nothing panics.
func FuzzTicketsName(f *testing.F) {
	f.Add("m", "m/queue/tickets-00000000000000000000")
	f.Add("m", "m/queue/tickets-00000000000000000007")
	f.Add("m", "m/queue/00000000000000000001")
	f.Add("jobs/1", "jobs/1/queue/tickets-99999999999999999999")
	f.Add("a/queue", "a/queue/queue/tickets-00000000000000000001")
	f.Add("m", "m/queue/tickets-18446744073709551615")
	f.Fuzz(func(t *testing.T, lock, name string) {
		q := &queue{lock: lock}
		if gen, ok := parseTickets(lock, name); ok {
			assert.Equal(t, name, q.tickets(gen))
			assert.Less(t, gen*ticketsPerGeneration+rotateAt+1, uint64(1)<<62, "tickets stay under 2^62")
		}
		if l, ok := (Status{Name: name}).QueueCounter(); ok {
			gen, ok := parseTickets(l, name)
			require.True(t, ok)
			assert.Equal(t, name, (&queue{lock: l}).tickets(gen))
		}
	})
}

// TestTicketGenerationMadeAgain: a joiner held up for longer than
// keptGenerations turns (its listing showed generation 0, and generations 1
// to 6 were made and 0 to 1 deleted meanwhile) creates generation 1 again,
// whose offsets were given already. Its listing after the create finds the
// newer ones: it deletes the one it made and takes its ticket from the
// newest, so no ticket is given twice.
func TestTicketGenerationMadeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, cc, q := queueEmu(t)
		ctx := context.Background()
		limit := time.Now().Add(time.Minute)
		for g := range uint64(7) {
			_, err := q.createGeneration(ctx, limit, g)
			require.NoError(t, err)
		}
		q.deleteGeneration(ctx, 0)
		q.deleteGeneration(ctx, 1)
		// The held-up joiner's append at the turn of generation 0.
		next, err := q.turn(ctx, limit, 0)
		require.NoError(t, err)
		assert.Equal(t, uint64(6), next, "to the newest")
		sts, err := InspectPrefix(ctx, cc, QueueName("m"))
		require.NoError(t, err)
		for _, st := range sts {
			assert.NotEqual(t, q.tickets(1), st.Name, "generation 1, made again, is deleted again")
		}
	})
}

// TestTicketGenerationCached: a queue value appends to the generation it
// last used without listing the tickets blobs, for genTrust; after that it
// lists again. A cached generation deleted since (404) or made anew since
// (its offsets went back: a joiner held up past keptGenerations made it
// again, and has not deleted it yet) is not used: the ticket comes from the
// newest generation, above every ticket given before.
func TestTicketGenerationCached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _, q := queueEmu(t)
		ctx := context.Background()
		var mu sync.Mutex
		listings := 0
		s.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpListBlobs {
				mu.Lock()
				listings++
				mu.Unlock()
			}
			return azleasetest.Fault{}
		})
		listed := func() int {
			mu.Lock()
			defer mu.Unlock()
			n := listings
			listings = 0
			return n
		}
		limit := func() time.Time { return time.Now().Add(time.Minute) }
		var prev uint64
		take := func(what string) {
			t.Helper()
			tk, err := q.take(ctx, limit())
			require.NoError(t, err, what)
			assert.Greater(t, tk, prev, what)
			prev = tk
		}
		take("first")
		assert.Positive(t, listed(), "the first join lists the tickets blobs")
		take("second")
		take("third")
		assert.Zero(t, listed(), "later joins append to the generation they know")
		time.Sleep(genTrust)
		take("after genTrust")
		assert.Equal(t, 1, listed(), "a generation known for genTrust is listed again")

		// Made anew: generations 1 to 6 made, 0 deleted and made again.
		for g := range uint64(7) {
			_, err := q.createGeneration(ctx, limit(), g)
			require.NoError(t, err)
		}
		q.deleteGeneration(ctx, 0)
		_, err := q.createGeneration(ctx, limit(), 0)
		require.NoError(t, err)
		listed()
		take("generation 0 made anew")
		assert.Equal(t, uint64(6*ticketsPerGeneration+1), prev, "from the newest generation")
		assert.Equal(t, 1, listed())

		// Deleted: the cached generation 6 is gone, 7 is the newest.
		_, err = q.createGeneration(ctx, limit(), 7)
		require.NoError(t, err)
		q.deleteGeneration(ctx, 6)
		take("generation 6 deleted")
		assert.Equal(t, uint64(7*ticketsPerGeneration+1), prev, "from the newest generation")
	})
}

// TestWaiterPacesAcrossVersions: an entry says its paces twice. This
// version reads its own key; an older version reads azleasepoll alone and
// takes its poll as the longest its first in line waits between two looks
// (PollInterval there), so this version, whose first waits up to
// timing.HeadCap(PollInterval), says that there: an older watcher never
// passes it over for sleeping as it should. An older entry (azleasepoll
// alone) is read as it says, which only lengthens what its watcher waits,
// and by the older schedule behind the first (no timing.NearCap).
func TestWaiterPacesAcrossVersions(t *testing.T) {
	w := waiter{Waiter: Waiter{Ticket: 7, Holder: "a"}, id: "id", headPoll: 200 * time.Millisecond, poll: time.Second}
	md := waiterMetadata(w)
	name := QueueName("m") + fmt.Sprintf("%020d", 7)
	got, ok := parseWaiter("m", Status{Name: name, raw: md})
	require.True(t, ok)
	assert.Equal(t, [2]time.Duration{200 * time.Millisecond, time.Second}, [2]time.Duration{got.headPoll, got.poll}, "this version's")
	assert.False(t, got.older)
	assert.Equal(t, timing.NearCap(time.Second), got.schedule(holdConfig{}, 0)(5, time.Hour), "this version's waiters near the front")
	h, p := parsePaces(*md[metaWaiterPoll])
	assert.Equal(t, 200*time.Millisecond, h)
	assert.Equal(t, timing.HeadCap(time.Second), p, "what an older version reads as the first's longest look")
	assert.Equal(t, timing.HeadLook(time.Hour, h, p), timing.HeadLook(time.Hour, 200*time.Millisecond, p),
		"an older reader's HeadLook (capped at the poll it read) is this version's")

	old := map[string]*string{metaWaiterID: md[metaWaiterID], metaWaiterPoll: to.Ptr("100,3000")}
	got, ok = parseWaiter("m", Status{Name: name, raw: old})
	require.True(t, ok)
	assert.Equal(t, [2]time.Duration{100 * time.Millisecond, 3 * time.Second}, [2]time.Duration{got.headPoll, got.poll}, "an older entry's")
	assert.True(t, got.older)
	assert.Equal(t, timing.OlderBackWait(5, time.Hour, 0, 3*time.Second), got.schedule(holdConfig{}, 0)(5, time.Hour),
		"an older version's waiter near the front may sleep as long as far back (no timing.NearCap)")

	w.poll = MaxPollInterval
	_, p = parsePaces(*waiterMetadata(w)[metaWaiterPoll])
	assert.Equal(t, MaxPollInterval, p, "within what older versions read")
}

// FuzzWaiterEntry: a queue entry's metadata, as a listing returns it, is
// read without panicking, and its paces are zero (the reader's own) or
// within MutexOptions' bounds.
func FuzzWaiterEntry(f *testing.F) {
	f.Add("00000000000000000007", "id", "200,1000", "200,2000", "a%20b", "1700000000000")
	f.Add("00000000000000000007", "id", "", "5,x", "", "")
	f.Add("0000000000000000000x", "", "1,2,3", "-1,99999999999999", "%zz", "-5")
	f.Fuzz(func(t *testing.T, key, id, looks, poll, holder, since string) {
		md := map[string]*string{metaWaiterID: &id, metaWaiterLooks: &looks, metaWaiterPoll: &poll,
			metaWaiterHolder: &holder, metaWaiterSince: &since}
		w, ok := parseWaiter("m", Status{Name: QueueName("m") + key, raw: md})
		if !ok {
			return
		}
		assert.NotEmpty(t, w.id)
		for _, d := range []time.Duration{w.headPoll, w.poll} {
			assert.True(t, d == 0 || (d >= 20*time.Millisecond && d <= MaxPollInterval), "pace %v", d)
		}
	})
}
