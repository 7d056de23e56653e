package azlease_test

// Waiters are quiet (issue 19 item 4): while a lock is held elsewhere, every
// kind of waiter makes one request per poll and none that fails, and an
// acquisition after a look costs what a direct one does. The requests are
// counted on the client's side of the wire (a counting transport in front
// of the in-process emulator), with their answers.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/azurite"
)

// Operations as the counter names them.
const (
	opRead    = "read" // Get Blob Properties
	opList    = "list" // List Blobs
	opAcquire = "acquire"
	opRelease = "release"
	opRenew   = "renew"
	opWrite   = "metadata" // Set Blob Metadata
)

// counter counts one client's requests, and the failed ones (an answer of
// 400 or more, or none), in the order they were sent.
type counter struct {
	mu      sync.Mutex
	ops     []string // every request's operation, in the order answered
	failed  []string // the failed ones, as "op status"
	sends   []sent   // every request, when it was sent
	latency time.Duration
}

// sent is a request's operation and send instant.
type sent struct {
	op string
	at time.Time
}

// countedClient returns a container client for the emulator whose requests
// are attributed to label and counted by c. Each request takes c.latency
// (fake time inside a synctest bubble) before it reaches the server.
func countedClient(t testing.TB, srv *azleasetest.Server, label string, c *counter) *container.Client {
	t.Helper()
	cred, err := container.NewSharedKeyCredential(azleasetest.Account, azleasetest.AccountKey)
	require.NoError(t, err)
	plain, err := srv.ContainerClient(testContainer, label)
	require.NoError(t, err)
	cc, err := container.NewClientWithSharedKeyCredential(plain.URL(), cred, &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &opCounter{next: srv.Transport(label), c: c}},
	})
	require.NoError(t, err)
	return cc
}

type opCounter struct {
	next policy.Transporter
	c    *counter
}

func (t *opCounter) Do(req *http.Request) (*http.Response, error) {
	op := opOf(req)
	t.c.mu.Lock()
	t.c.sends = append(t.c.sends, sent{op, time.Now()})
	t.c.mu.Unlock()
	if d := t.c.latency; d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-req.Context().Done():
			timer.Stop()
			t.c.record(op, "no answer")
			return nil, req.Context().Err()
		}
	}
	resp, err := t.next.Do(req)
	switch {
	case err != nil:
		t.c.record(op, "no answer")
	case resp.StatusCode >= 400:
		t.c.record(op, fmt.Sprintf("%d %s", resp.StatusCode, header(resp.Header, "x-ms-error-code")))
	default:
		t.c.record(op, "")
	}
	return resp, err
}

// opOf names a request's operation; one on an election's candidate or
// yield blob (an Elector's candidacy) is prefixed with "candidate ".
func opOf(r *http.Request) string {
	if strings.Contains(r.URL.Path, "/candidates/") {
		return "candidate " + plainOpOf(r)
	}
	return plainOpOf(r)
}

func plainOpOf(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case q.Get("comp") == "lease":
		return strings.ToLower(header(r.Header, "x-ms-lease-action"))
	case q.Get("comp") == "list":
		return opList
	case q.Get("comp") == "metadata" && r.Method == http.MethodPut:
		return opWrite
	case r.Method == http.MethodHead:
		return opRead
	case r.Method == http.MethodPut && q.Get("restype") == "container":
		return "create-container"
	case r.Method == http.MethodPut:
		return "put"
	}
	return r.Method + " " + q.Get("comp")
}

// header finds a header by case-insensitive name: azblob sets some with
// names that are not canonical.
func header(h http.Header, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (c *counter) record(op, failure string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = append(c.ops, op)
	if failure != "" {
		c.failed = append(c.failed, op+" "+failure)
	}
}

// mark returns how many requests have been counted, for since.
func (c *counter) mark() (ops, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ops), len(c.failed)
}

// since returns the operations and failures counted after a mark.
func (c *counter) since(ops, failed int) ([]string, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ops[ops:]), slices.Clone(c.failed[failed:])
}

// sent returns every request's send instant so far.
func (c *counter) sent() []sent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sends)
}

// only reports whether every element of ops is op.
func only(ops []string, op string) bool {
	for _, o := range ops {
		if o != op {
			return false
		}
	}
	return true
}

// tally counts ops by operation, for messages.
func tally(ops []string) map[string]int {
	n := map[string]int{}
	for _, o := range ops {
		n[o]++
	}
	return n
}

// requirePolls checks that n requests over window are one per poll of
// interval poll with jitter j (each wait is poll × (1 ± j)).
func requirePolls(t *testing.T, n int, window, poll time.Duration, j float64) {
	t.Helper()
	lo := int(float64(window)/(float64(poll)*(1+j))) - 1
	hi := int(float64(window)/(float64(poll)*(1-j))) + 1
	require.GreaterOrEqual(t, n, lo, "fewer requests than polls")
	require.LessOrEqual(t, n, hi, "more than one request per poll")
}

const idleWindow = 10 * time.Minute

// TestTryLockIsOneRequest: an unordered TryLock on a held mutex is one
// request, the refused acquire; on a free one, acquire and the epoch write
// (with its read). (A fair TryLock looks first: fairlock_test.go.)
func TestTryLockIsOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		holder := newMutex(t, e, "holder", "job", nil)
		lk, ok, err := holder.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)

		var c counter
		m, err := azlease.NewMutex(countedClient(t, e.Server, "w", &c), "job", unordered)
		require.NoError(t, err)
		_, ok, err = m.TryLock(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		ops, failed := c.since(0, 0)
		assert.Equal(t, []string{opAcquire}, ops, "one request")
		assert.Equal(t, []string{"acquire 409 LeaseAlreadyPresent"}, failed)

		require.NoError(t, lk.Unlock(ctx))
		o0, _ := c.mark()
		lk, ok, err = m.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		ops, _ = c.since(o0, 0)
		assert.Equal(t, []string{opAcquire, opRead, opWrite}, ops, "TryLock acquires directly: no look")
		require.NoError(t, lk.Unlock(ctx))
	})
}

// unordered is the waiting of a Mutex or Semaphore before fair locks, which
// the quiet tests below measure; fairlock_test.go measures the queue's.
var unordered = &azlease.MutexOptions{Unordered: true}

// TestLockWaiterIsQuiet: an unordered Lock waiting on a held mutex reads once per poll
// and makes no failed request; when the holder unlocks, it takes the lock
// with read, acquire, write: the read that found it free stands in for the
// epoch write's own.
func TestLockWaiterIsQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		holder := newMutex(t, e, "holder", "job", nil)
		lk, ok, err := holder.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)

		var c counter
		m, err := azlease.NewMutex(countedClient(t, e.Server, "w", &c), "job", unordered)
		require.NoError(t, err)
		got := make(chan *azlease.Lock, 1)
		go func() {
			l, err := m.Lock(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		time.Sleep(time.Minute)
		o0, f0 := c.mark()
		time.Sleep(idleWindow)
		ops, failed := c.since(o0, f0)
		assert.Empty(t, failed, "no failed request while the lock is held")
		assert.True(t, only(ops, opRead), "only reads while waiting: %v", tally(ops))
		requirePolls(t, len(ops), idleWindow, time.Second, 0.2)

		o0, _ = c.mark()
		require.NoError(t, lk.Unlock(ctx))
		since := time.Now()
		l := <-got
		assert.LessOrEqual(t, time.Since(since), 1200*time.Millisecond, "within one poll")
		ops, _ = c.since(o0, 0)
		assert.Equal(t, []string{opRead, opAcquire, opWrite}, ops, "the handoff costs what a TryLock does")
		assert.Equal(t, lk.Epoch()+1, l.Epoch())
		st, err := azlease.Inspect(ctx, e.client("test"), "job")
		require.NoError(t, err)
		assert.Equal(t, l.Epoch(), st.Epoch)
		assert.Equal(t, []uint64{l.Epoch(), lk.Epoch()}, []uint64{st.History[0].Epoch, st.History[1].Epoch}, "the history goes on from the look's record")
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestLockHandOffAfterAWriteSinceTheLook: another holder takes and
// releases the lock between a waiter's look and its acquire, writing the
// blob: the waiter's write, conditional on the ETag it saw, is refused, and
// it reads and writes again, so its epoch is above the other holder's.
func TestLockHandOffAfterAWriteSinceTheLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		first := newMutex(t, e, "first", "job", nil)
		lk, ok, err := first.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)

		// The waiter's acquire, once the lock is free, waits 1 s on its way
		// to the server; meanwhile "other" takes the lock and unlocks it.
		acquiring := make(chan struct{})
		var once sync.Once
		e.SetFaults(faultsFor("w", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op != azleasetest.OpAcquireLease {
				return azleasetest.Fault{}
			}
			delayed := false
			once.Do(func() { close(acquiring); delayed = true })
			if delayed {
				return azleasetest.Fault{Delay: time.Second}
			}
			return azleasetest.Fault{}
		}))
		var c counter
		m, err := azlease.NewMutex(countedClient(t, e.Server, "w", &c), "job", unordered)
		require.NoError(t, err)
		got := make(chan *azlease.Lock, 1)
		go func() {
			l, err := m.Lock(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		time.Sleep(10 * time.Second)
		require.NoError(t, lk.Unlock(ctx))
		<-acquiring
		other := newMutex(t, e, "other", "job", nil)
		lo, ok, err := other.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the waiter's acquire is still on its way")
		require.NoError(t, lo.Unlock(ctx))

		l := <-got
		assert.Greater(t, lo.Epoch(), lk.Epoch())
		assert.Equal(t, lo.Epoch()+1, l.Epoch(), "the epoch grows from the record written since the look")
		_, failed := c.since(0, 0)
		assert.Equal(t, []string{"metadata 412 ConditionNotMet"}, failed, "the write from the look is refused once")
		st, err := azlease.Inspect(ctx, e.client("test"), "job")
		require.NoError(t, err)
		assert.Equal(t, l.Epoch(), st.Epoch)
		require.GreaterOrEqual(t, len(st.History), 3)
		assert.Equal(t, []uint64{l.Epoch(), lo.Epoch(), lk.Epoch()}, []uint64{st.History[0].Epoch, st.History[1].Epoch, st.History[2].Epoch})
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestSemaphoreWaiterIsQuiet: a Semaphore's Acquire on all-held slots makes
// one List Blobs request per poll whatever n, none failing; when a slot
// frees, it takes that slot with list, acquire, write.
func TestSemaphoreWaiterIsQuiet(t *testing.T) {
	azlease.HeavyTest(t)
	for _, n := range []int{2, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				locks := make([]*azlease.Lock, n)
				for i := range n {
					h := newSemaphore(t, e, fmt.Sprintf("h%d", i), "exports", n, nil)
					l, ok, err := h.TryAcquire(ctx)
					require.NoError(t, err)
					require.True(t, ok)
					locks[i] = l
				}
				// A blob named like a slot of a larger semaphore is not one.
				other := newSemaphore(t, e, "x", "exports", 12, nil)
				for range 12 - n {
					_, _, err := other.TryAcquire(ctx)
					require.NoError(t, err)
				}

				var c counter
				s, err := azlease.NewSemaphore(countedClient(t, e.Server, "w", &c), "exports", n, unordered)
				require.NoError(t, err)
				got := make(chan *azlease.Lock, 1)
				go func() {
					l, err := s.Acquire(ctx)
					assert.NoError(t, err)
					got <- l
				}()
				time.Sleep(time.Minute)
				o0, f0 := c.mark()
				time.Sleep(idleWindow)
				ops, failed := c.since(o0, f0)
				assert.Empty(t, failed, "no failed request while every slot is held")
				assert.True(t, only(ops, opList), "one listing per poll: %v", tally(ops))
				requirePolls(t, len(ops), idleWindow, time.Second, 0.2)

				o0, _ = c.mark()
				freed := locks[n/2]
				require.NoError(t, freed.Unlock(ctx))
				l := <-got
				ops, failed = c.since(o0, 0)
				assert.Equal(t, []string{opList, opAcquire, opWrite}, ops)
				assert.Empty(t, failed)
				assert.Equal(t, freed.Name(), l.Name(), "the slot that freed")
				assert.Equal(t, freed.Epoch()+1, l.Epoch())
				require.NoError(t, l.Unlock(ctx))
				for i, lk := range locks {
					if i != n/2 {
						require.NoError(t, lk.Unlock(ctx))
					}
				}
			})
		})
	}
}

// TestSemaphoreOfOneIsTheMutex: NewSemaphore(cc, NAME, 1) holds the lock
// blob NAME itself, as NewMutex(cc, NAME) and "azlease lock -n 1 NAME" do,
// so they exclude each other; its waiter reads NAME once per poll.
func TestSemaphoreOfOneIsTheMutex(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		s := newSemaphore(t, e, "s", "deploy", 1, nil)
		m := newMutex(t, e, "m", "deploy", nil)

		ls, ok, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, "deploy", ls.Name())
		_, ok, err = m.TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "the Mutex on the same name is held")

		var c counter
		w, err := azlease.NewSemaphore(countedClient(t, e.Server, "w", &c), "deploy", 1, unordered)
		require.NoError(t, err)
		got := make(chan *azlease.Lock, 1)
		go func() {
			l, err := w.Acquire(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		time.Sleep(time.Minute)
		o0, f0 := c.mark()
		time.Sleep(idleWindow)
		ops, failed := c.since(o0, f0)
		assert.Empty(t, failed)
		assert.True(t, only(ops, opRead), "one read of deploy per poll: %v", tally(ops))
		requirePolls(t, len(ops), idleWindow, time.Second, 0.2)
		require.NoError(t, ls.Unlock(ctx))
		l := <-got
		assert.Equal(t, "deploy", l.Name())
		_, ok, err = s.TryAcquire(ctx)
		require.NoError(t, err)
		assert.False(t, ok)
		require.NoError(t, l.Unlock(ctx))

		lm, ok, err := m.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		_, ok, err = s.TryAcquire(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "the Semaphore of one slot is held by the Mutex")
		require.NoError(t, lm.Unlock(ctx))
		assert.Equal(t, "x/slot-3", azlease.SlotName("x", 3), "more than one slot: NAME/slot-i")
	})
}

// TestClaimLooksWithOneList: Claim over 8 held names is one List Blobs
// request, none failing, even when the names share no prefix; a free name
// is taken with list, acquire, write.
func TestClaimLooksWithOneList(t *testing.T) {
	azlease.HeavyTest(t)
	for _, tc := range []struct {
		name   string
		prefix func(i int) string
	}{
		{"common prefix", func(i int) string { return fmt.Sprintf("jobs/%d", i) }},
		{"no common prefix", func(i int) string { return fmt.Sprintf("%c-job", 'a'+i) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				names := make([]string, 8)
				locks := make([]*azlease.Lock, 8)
				for i := range names {
					names[i] = tc.prefix(i)
					l, ok, err := newMutex(t, e, "h", names[i], nil).TryLock(ctx)
					require.NoError(t, err)
					require.True(t, ok)
					locks[i] = l
				}
				var c counter
				cc := countedClient(t, e.Server, "w", &c)
				// A waiter that claims once a second, for the idle window.
				for range int(idleWindow / time.Second) {
					_, _, err := azlease.Claim(ctx, cc, names, nil)
					require.ErrorIs(t, err, azlease.ErrLeaseHeld)
					time.Sleep(time.Second)
				}
				ops, failed := c.since(0, 0)
				assert.Empty(t, failed)
				assert.Len(t, ops, int(idleWindow/time.Second), "one request per Claim")
				assert.True(t, only(ops, opList), "%v", tally(ops))

				require.NoError(t, locks[5].Unlock(ctx))
				o0, _ := c.mark()
				name, l, err := azlease.Claim(ctx, cc, names, nil)
				require.NoError(t, err)
				assert.Equal(t, names[5], name)
				ops, failed = c.since(o0, 0)
				assert.Equal(t, []string{opList, opAcquire, opWrite}, ops)
				assert.Empty(t, failed)
				assert.Equal(t, locks[5].Epoch()+1, l.Epoch())
				require.NoError(t, l.Unlock(ctx))
				for i, lk := range locks {
					if i != 5 {
						require.NoError(t, lk.Unlock(ctx))
					}
				}
				// A name whose blob does not exist yet is free.
				name, l, err = azlease.Claim(ctx, cc, []string{names[0], names[0] + "-new"}, nil)
				require.NoError(t, err)
				assert.Equal(t, names[0], name)
				require.NoError(t, l.Unlock(ctx))
			})
		})
	}
}

// TestDoOnceWaiterIsQuiet: a DoOnce caller waiting while another runs fn
// reads once per poll and makes no failed request.
func TestDoOnceWaiterIsQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		release := make(chan struct{})
		running := make(chan struct{})
		ran := make(chan error, 1)
		go func() {
			_, err := azlease.DoOnce(ctx, e.client("runner"), "migrate", nil, func(ctx context.Context, _ azlease.Token) error {
				close(running)
				<-release
				return nil
			})
			ran <- err
		}()
		<-running
		var c counter
		waited := make(chan azlease.OnceResult, 1)
		go func() {
			res, err := azlease.DoOnce(ctx, countedClient(t, e.Server, "w", &c), "migrate", nil, func(context.Context, azlease.Token) error {
				return errors.New("must not run")
			})
			assert.NoError(t, err)
			waited <- res
		}()
		time.Sleep(time.Minute)
		o0, f0 := c.mark()
		time.Sleep(idleWindow)
		ops, failed := c.since(o0, f0)
		assert.Empty(t, failed, "no failed request while another runs fn")
		assert.True(t, only(ops, opRead), "%v", tally(ops))
		requirePolls(t, len(ops), idleWindow, 2*time.Second, 0.2)
		close(release)
		require.NoError(t, <-ran)
		res := <-waited
		assert.False(t, res.Ran)
		assert.Equal(t, azlease.OnceDone, res.Status.State)
	})
}

// TestElectorFollowerIsQuiet: a follower reads once per poll and makes no
// failed request while another leads; with succession, as the leader's
// standby (the only other candidate), it reads every second (a fifth of
// PollInterval) and writes its candidacy every 5 s (a third of its lease
// duration: its liveness). When the leader stops, it takes over with read,
// acquire, write (NoSuccession), or, handed over with planned succession,
// with the read that finds the hand-off, change, renew, write.
func TestElectorFollowerIsQuiet(t *testing.T) {
	for _, succession := range []bool{false, true} {
		t.Run(map[bool]string{false: "NoSuccession", true: "succession"}[succession], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				leader, err := azlease.NewElector(e.client("leader"), "svc", &azlease.ElectorOptions{Identity: "leader", NoSuccession: !succession})
				require.NoError(t, err)
				require.NoError(t, leader.Start(ctx, nil))
				time.Sleep(time.Second)
				require.True(t, leader.IsLeader())

				var c counter
				follower, err := azlease.NewElector(countedClient(t, e.Server, "w", &c), "svc", &azlease.ElectorOptions{Identity: "follower", NoSuccession: !succession})
				require.NoError(t, err)
				require.NoError(t, follower.Start(ctx, nil))
				time.Sleep(time.Minute)
				o0, f0 := c.mark()
				time.Sleep(idleWindow)
				ops, failed := c.since(o0, f0)
				assert.Empty(t, failed, "no failed request while another leads")
				if succession {
					reads := slices.DeleteFunc(slices.Clone(ops), func(op string) bool { return op == "candidate "+opWrite })
					requirePolls(t, len(ops)-len(reads), idleWindow, 5*time.Second, 0.1)
					assert.True(t, only(reads, opRead), "%v", tally(ops))
					requirePolls(t, len(reads), idleWindow, time.Second, 0.1)
				} else {
					assert.True(t, only(ops, opRead), "%v", tally(ops))
					requirePolls(t, len(ops), idleWindow, 5*time.Second, 0.2)
				}

				o0, _ = c.mark()
				require.NoError(t, leader.Stop(ctx))
				for i := 0; i < 100 && !follower.IsLeader(); i++ {
					time.Sleep(100 * time.Millisecond)
				}
				require.True(t, follower.IsLeader())
				ops, failed = c.since(o0, 0)
				assert.Empty(t, failed)
				require.GreaterOrEqual(t, len(ops), 3)
				if !succession {
					assert.Equal(t, []string{opRead, opAcquire, opWrite}, ops[len(ops)-3:], "the takeover: the poll's read stands in for the epoch write's")
				} else {
					// Its candidacy's writes aside (the acknowledgement,
					// and its refreshes).
					lock := slices.DeleteFunc(slices.Clone(ops), func(op string) bool { return op == "candidate "+opWrite })
					require.Greater(t, len(ops)-len(lock), 0, "the acknowledgement: %v", ops)
					i := slices.Index(lock, "change")
					require.Greater(t, i, 1, "%v", ops)
					// The renewal and the epoch write go together, in
					// either order.
					assert.Equal(t, []string{opRead, "change"}, lock[i-1:i+1], "the take-over of a hand-off: %v", ops)
					assert.ElementsMatch(t, []string{opRenew, opWrite}, lock[i+1:i+3], "the take-over of a hand-off: %v", ops)
					assert.True(t, only(lock[:i], opRead), "polls while designated: %v", ops)
				}
				require.NoError(t, follower.Stop(ctx))
			})
		})
	}
}

// roundTripperFunc adapts a function to http.RoundTripper.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestAzuriteWaitersLookFirst: on the real wire, an unordered Mutex.Lock
// waiter and Semaphore.Acquire waiter (two slots) make only reads or listings while
// the lock is held, none failing, and take it with read (or list),
// acquire, write: Azurite keeps the ETag through lease operations and
// lists it as Get Blob Properties gives it (without quotes), so the epoch
// write from the look is not refused.
func TestAzuriteWaitersLookFirst(t *testing.T) {
	t.Parallel()
	az := azurite.Require(t)
	name := unique("quiet")
	ctx := context.Background()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	counted := func(c *counter) *container.Client {
		oc := &opCounter{next: &http.Client{Transport: tr}, c: c}
		cc, err := az.ContainerClient(name, &http.Client{Transport: roundTripperFunc(oc.Do)})
		require.NoError(t, err)
		return cc
	}
	opts := &azlease.MutexOptions{PollInterval: 100 * time.Millisecond, Unordered: true}
	for _, tc := range []struct {
		name string
		look string
		hold func() []*azlease.Lock
		wait func(cc *container.Client) (*azlease.Lock, error)
	}{
		{"Mutex.Lock", opRead, func() []*azlease.Lock {
			m, err := azlease.NewMutex(azuriteClient(t, name), "job", nil)
			require.NoError(t, err)
			l, ok, err := m.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			return []*azlease.Lock{l}
		}, func(cc *container.Client) (*azlease.Lock, error) {
			m, err := azlease.NewMutex(cc, "job", opts)
			require.NoError(t, err)
			return m.Lock(ctx)
		}},
		{"Semaphore.Acquire", opList, func() []*azlease.Lock {
			s, err := azlease.NewSemaphore(azuriteClient(t, name), "pool", 2, nil)
			require.NoError(t, err)
			var locks []*azlease.Lock
			for range 2 {
				l, ok, err := s.TryAcquire(ctx)
				require.NoError(t, err)
				require.True(t, ok)
				locks = append(locks, l)
			}
			return locks
		}, func(cc *container.Client) (*azlease.Lock, error) {
			s, err := azlease.NewSemaphore(cc, "pool", 2, opts)
			require.NoError(t, err)
			return s.Acquire(ctx)
		}},
	} {
		held := tc.hold()
		var c counter
		cc := counted(&c)
		got := make(chan *azlease.Lock, 1)
		go func() {
			l, err := tc.wait(cc)
			assert.NoError(t, err, tc.name)
			got <- l
		}()
		time.Sleep(time.Second)
		o0, _ := c.mark()
		require.NoError(t, held[0].Unlock(ctx))
		l := <-got
		ops, failed := c.since(0, 0)
		assert.Empty(t, failed, "%s: no failed request", tc.name)
		assert.GreaterOrEqual(t, o0, 3, "%s: it polled while the lock was held", tc.name)
		assert.True(t, only(ops[:o0], tc.look), "%s: %v", tc.name, tally(ops[:o0]))
		require.GreaterOrEqual(t, len(ops), 3)
		assert.Equal(t, []string{tc.look, opAcquire, opWrite}, ops[len(ops)-3:], "%s: the takeover", tc.name)
		assert.Equal(t, held[0].Name(), l.Name())
		assert.Equal(t, held[0].Epoch()+1, l.Epoch(), tc.name)
		require.NoError(t, l.Unlock(ctx))
		for _, h := range held[1:] {
			require.NoError(t, h.Unlock(ctx))
		}
	}
}
