package azlease_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/internal/azurite"
)

// Azurite tests prove on the real wire what the emulator tests prove in
// fake time. They run in parallel, so real lease expiries overlap. Those
// built on newWire (wire_test.go) run on a real Azure account instead when
// make live-azure names one.

// lossyTransport sends requests to Azurite and, when lose says so, throws the
// response away and reports a broken connection: the request took effect but
// the client cannot know.
type lossyTransport struct {
	next http.RoundTripper
	lose func(*http.Request) bool
}

var errLostResponse = errors.New("test: response lost on the way back")

func (l *lossyTransport) Do(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err == nil && l.lose(req) {
		resp.Body.Close()
		return nil, errLostResponse
	}
	return resp, err
}

// leaseAction reads x-ms-lease-action; azblob sets it under a raw
// lower-case key, which Header.Get does not find.
func leaseAction(req *http.Request) string {
	//lint:ignore SA1008 azblob stores this header under the raw lower-case key
	return strings.Join(req.Header["x-ms-lease-action"], "")
}

func TestAzuriteLeaseLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cc := newWire(t, "lifecycle").client() // on Azurite, the container does not exist yet
	a := newLease(t, cc, "leader", &azlease.LeaseOptions{Identity: "node-a"})
	b := newLease(t, cc, "leader", &azlease.LeaseOptions{Identity: "node-b"})

	tokA, err := a.Acquire(ctx)
	require.NoError(t, err)
	st0, err := azlease.Inspect(ctx, cc, "leader")
	require.NoError(t, err)
	assert.Equal(t, tokA.Epoch, st0.Epoch)
	assert.Greater(t, tokA.Epoch, uint64(time.Now().Add(-time.Hour).UnixMilli()), "the first epoch comes from the blob's creation time on Azurite's clock")
	_, err = b.Acquire(ctx)
	require.ErrorIs(t, err, azlease.ErrLeaseHeld)
	require.NoError(t, a.Renew(ctx))
	require.NoError(t, a.SetMetadata(ctx, map[string]string{"checkpoint": "7"}))
	require.NoError(t, a.Write(ctx, []byte("state")))
	require.NoError(t, a.Release(ctx))

	tokB, err := b.Acquire(ctx)
	require.NoError(t, err)
	// Greater, not +1: Azurite gives an overwritten blob (Write) a new
	// creation time, and the epoch's floor follows it.
	assert.Greater(t, tokB.Epoch, tokA.Epoch)
	st, err := azlease.Inspect(ctx, cc, "leader")
	require.NoError(t, err)
	assert.Equal(t, "node-b", st.Holder)
	assert.True(t, st.Leased)
	assert.Equal(t, map[string]string{"checkpoint": "7"}, st.Metadata)
	require.Len(t, st.History, 2)
	assert.Equal(t, "state", download(t, cc, "leader"))

	// The former holder's lease ID no longer writes anything.
	_, err = cc.NewBlobClient("leader").SetMetadata(raw(ctx), map[string]*string{"x": to.Ptr("1")},
		&blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &tokA.LeaseID}}})
	assert.True(t, bloberror.HasCode(err, bloberror.LeaseIDMismatchWithBlobOperation), "%v", err)

	// Breaking ends b's term at its next renewal.
	_, err = newLease(t, cc, "leader", nil).Break(ctx, 0)
	require.NoError(t, err)
	require.ErrorIs(t, b.Renew(ctx), azlease.ErrLeaseBroken)
}

// TestAzuriteLeaseLostResponses: acquire and release both take effect on
// Azurite while their responses are lost; the Lease resolves both.
func TestAzuriteLeaseLostResponses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var lostAcquire, lostRelease atomic.Int32
	w := newWire(t, "lost-responses")
	cc := w.lossy(func(req *http.Request) bool {
		switch leaseAction(req) {
		case "acquire":
			return lostAcquire.Add(1) == 1
		case "release":
			return lostRelease.Add(1) == 1
		}
		return false
	})
	// Create the container and lock blob first, so that the lost acquire
	// is one Azurite granted.
	pre := newLease(t, w.client(), "x", nil)
	tokPre, err := pre.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, pre.Release(ctx))

	l := newLease(t, cc, "x", nil)
	tok, err := l.Acquire(ctx)
	require.NoError(t, err, "the same-ID retry is granted")
	assert.Equal(t, int32(2), lostAcquire.Load())
	assert.Equal(t, tokPre.Epoch+1, tok.Epoch)
	require.NoError(t, l.Release(ctx), "the retry's 409 means the lost release worked")
	assert.Equal(t, int32(2), lostRelease.Load())
	_, err = newLease(t, w.client(), "x", nil).Acquire(ctx)
	require.NoError(t, err, "released for real")
}

// TestAzuriteLeaseExpiry: a holder that stops renewing loses the lease to a
// follower after the lease duration, on Azurite's real clock, and learns it
// at its next renewal.
func TestAzuriteLeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cc := newWire(t, "expiry").client()
	a := newLease(t, cc, "x", nil)
	b := newLease(t, cc, "x", nil)
	tokA, err := a.Acquire(ctx)
	require.NoError(t, err)
	validUntil := a.ValidUntil()
	start := time.Now()
	var tok azlease.Token
	for time.Since(start) < 30*time.Second {
		if tok, err = b.Acquire(ctx); err == nil {
			break
		}
		require.ErrorIs(t, err, azlease.ErrLeaseHeld)
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err)
	assert.True(t, time.Now().After(validUntil), "the follower got the lease only after a's validity ended")
	assert.Equal(t, tokA.Epoch+1, tok.Epoch)
	require.ErrorIs(t, a.Renew(ctx), azlease.ErrLeaseLost)
}

// TestAzuriteCreateOnLeasedBlob: Azurite answers a create-if-absent on a
// leased blob with 409 BlobAlreadyExists (Azure: 412 LeaseIdMissing). Both
// mean "exists": a Lease whose acquire raced with another creator reports
// the lease as held.
func TestAzuriteCreateOnLeasedBlob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var first atomic.Bool
	first.Store(true)
	name := unique("create-race")
	other := azuriteClient(t, name)
	// The blob does not exist when the acquire is sent; it exists and is
	// leased by another holder when the create-if-absent arrives.
	_, err := other.Create(raw(ctx), nil)
	require.NoError(t, err)
	otherLease := newLease(t, other, "x", nil)
	hook := &hookTransport{next: &http.Transport{}, before: func(req *http.Request) {
		if req.Method == http.MethodPut && req.URL.Query().Get("comp") == "" && first.Swap(false) {
			_, err := otherLease.Acquire(ctx)
			require.NoError(t, err)
		}
	}}
	t.Cleanup(hook.next.CloseIdleConnections)
	cred, err := container.NewSharedKeyCredential(azurite.Account, azurite.Key)
	require.NoError(t, err)
	cc, err := container.NewClientWithSharedKeyCredential(azurite.Require(t).URL+"/"+name, cred,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: hook}})
	require.NoError(t, err)
	_, err = newLease(t, cc, "x", nil).Acquire(ctx)
	require.ErrorIs(t, err, azlease.ErrLeaseHeld)
	assert.False(t, first.Load(), "the race happened")
}

type hookTransport struct {
	next   *http.Transport
	before func(*http.Request)
}

func (h *hookTransport) Do(req *http.Request) (*http.Response, error) {
	h.before(req)
	return h.next.RoundTrip(req)
}

// killSwitch is a transport whose requests all fail once killed: to every
// other process, its owner has crashed (it stops renewing without releasing).
type killSwitch struct {
	next   *http.Transport
	killed atomic.Bool
}

func (k *killSwitch) Do(req *http.Request) (*http.Response, error) {
	if k.killed.Load() {
		return nil, errors.New("test: this process has crashed")
	}
	return k.next.RoundTrip(req)
}

// waitLeading polls (real time) until e leads.
func waitLeading(t *testing.T, e *azlease.Elector, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if e.IsLeader() {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("not leading within %v", limit)
	return 0
}

var azuriteElectorOpts = azlease.ElectorOptions{PollInterval: time.Second}

func TestAzuriteElectorHandoffAndIdentity(t *testing.T) {
	t.Parallel()
	w := newWire(t, "handoff")
	ctx := context.Background()
	oa, ob := azuriteElectorOpts, azuriteElectorOpts
	oa.Identity, ob.Identity = "worker-a", "worker-b"
	a, err := azlease.NewElector(w.client(), "leader", &oa)
	require.NoError(t, err)
	b, err := azlease.NewElector(w.client(), "leader", &ob)
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx, nil))
	waitLeading(t, a, 10*time.Second)
	require.NoError(t, b.Start(ctx, nil))

	// The follower sees who leads, with identity and epoch.
	info := <-b.Changes()
	assert.Equal(t, "worker-a", info.Holder)
	assert.Equal(t, a.Term().Epoch(), info.Epoch)
	assert.True(t, info.Leased)
	assert.False(t, info.Self)
	seen, err := b.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "worker-a", seen.Holder)

	stopped := time.Now()
	require.NoError(t, a.Stop(ctx))
	waitLeading(t, b, 10*time.Second)
	handoff := time.Since(stopped)
	// About PollInterval × (1 + Jitter) (the designated successor's
	// acknowledgement) plus a few round trips; the bound only tells a
	// hand-off from a failover (the 15 s lease's expiry), with room for a
	// loaded machine (2.5 s seen under make test's load).
	assert.Less(t, handoff, 5*time.Second, "a hand-off, not the lease's expiry")
	assert.Equal(t, info.Epoch+1, b.Term().Epoch())
	t.Logf("graceful handoff on %s: %v", w.b.Name, handoff)
	require.NoError(t, b.Stop(ctx))
}

func TestAzuriteElectorCrashFailover(t *testing.T) {
	t.Parallel()
	w := newWire(t, "failover")
	ctx := context.Background()
	cca, kill := w.killable()
	a, err := azlease.NewElector(cca, "leader", &azuriteElectorOpts)
	require.NoError(t, err)
	b, err := azlease.NewElector(w.client(), "leader", &azuriteElectorOpts)
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx, nil))
	waitLeading(t, a, 10*time.Second)
	require.NoError(t, b.Start(ctx, nil))
	time.Sleep(2 * time.Second)
	aTerm := a.Term()
	require.NotNil(t, aTerm)

	crashed := time.Now()
	kill.killed.Store(true)
	waitLeading(t, b, 30*time.Second)
	failover := time.Since(crashed)
	<-aTerm.Done()
	assert.ErrorIs(t, aTerm.Err(), azlease.ErrDeadlinePassed)
	assert.False(t, a.IsLeader())
	assert.Less(t, failover, 15*time.Second+1200*time.Millisecond+3*time.Second, "within LeaseDuration + PollInterval × (1 + Jitter) + slack (round trips on a loaded machine)")
	assert.True(t, time.Now().After(aTerm.ValidUntil()), "the old leader had stopped trusting its lease")
	t.Logf("crash failover on %s: %v", w.b.Name, failover)
	require.NoError(t, b.Stop(ctx))
	require.NoError(t, a.Stop(ctx))
}

func TestAzuriteMutex(t *testing.T) {
	t.Parallel()
	w := newWire(t, "mutex")
	ctx := context.Background()
	a, err := azlease.NewMutex(w.client(), "critical", &azlease.MutexOptions{PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	b, err := azlease.NewMutex(w.client(), "critical", &azlease.MutexOptions{PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)

	la, ok, err := a.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = b.TryLock(ctx)
	require.NoError(t, err)
	require.False(t, ok, "held elsewhere")
	require.NoError(t, la.Unlock(ctx))
	require.NoError(t, la.Unlock(ctx))

	// Exclusion on the wire: a read–sleep–write counter loses no update.
	var counter, inside int64
	var wg sync.WaitGroup
	for i := range 4 {
		m := []*azlease.Mutex{a, b}[i%2]
		wg.Go(func() {
			for range 5 {
				require.NoError(t, m.Do(ctx, func(ctx context.Context, _ *azlease.Lock) error {
					require.Equal(t, int64(1), atomic.AddInt64(&inside, 1))
					defer atomic.AddInt64(&inside, -1)
					v := atomic.LoadInt64(&counter)
					time.Sleep(20 * time.Millisecond)
					atomic.StoreInt64(&counter, v+1)
					return nil
				}))
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(20), counter)

	job, lock, err := azlease.Claim(ctx, w.client(), []string{"jobs/1", "jobs/2"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "jobs/1", job)
	job2, lock2, err := azlease.Claim(ctx, w.client(), []string{"jobs/1", "jobs/2"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "jobs/2", job2)
	require.NoError(t, lock.Unlock(ctx))
	require.NoError(t, lock2.Unlock(ctx))
}

func TestAzuriteDoOnce(t *testing.T) {
	t.Parallel()
	w := newWire(t, "doonce")
	ctx := context.Background()
	var runs, inside atomic.Int32
	var wg sync.WaitGroup
	results := make([]azlease.OnceResult, 9)
	for i := range results {
		cc := w.client() // a client (a "process") each
		wg.Go(func() {
			res, err := azlease.DoOnce(ctx, cc, "release-1.2.3/seed",

				&azlease.DoOnceOptions{Identity: fmt.Sprintf("proc-%d", i), PollInterval: 200 * time.Millisecond}, func(ctx context.Context, tok azlease.Token) error {
					runs.Add(1)
					require.Equal(t, int32(1), inside.Add(1))
					defer inside.Add(-1)
					time.Sleep(500 * time.Millisecond)
					return nil
				})

			require.NoError(t, err)
			results[i] = res
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), runs.Load())
	ran := 0
	for _, r := range results {
		if r.Ran {
			ran++
		}
		assert.Equal(t, results[0].Status.Holder, r.Status.Holder)
	}
	assert.Equal(t, 1, ran)

	// Failure propagation with MaxAttempts 1, then reset.
	opts := &azlease.DoOnceOptions{MaxAttempts: 1, PollInterval: 200 * time.Millisecond}
	boom := errors.New("boom")
	_, err := azlease.DoOnce(ctx, w.client(), "fails", opts, func(context.Context, azlease.Token) error { return boom })
	require.ErrorIs(t, err, boom)
	_, err = azlease.DoOnce(ctx, w.client(), "fails", opts, func(context.Context, azlease.Token) error { return nil })
	require.ErrorIs(t, err, azlease.ErrOnceFailed)
	require.NoError(t, azlease.ResetOnce(ctx, w.client(), "fails", opts))
	res, err := azlease.DoOnce(ctx, w.client(), "fails", opts, func(context.Context, azlease.Token) error { return nil })
	require.NoError(t, err)
	assert.True(t, res.Ran)
}

// TestAzuriteDoOnceRunnerCrash: the runner's process dies mid-fn; a waiter
// takes over when the lease expires on Azurite's clock.
func TestAzuriteDoOnceRunnerCrash(t *testing.T) {
	t.Parallel()
	w := newWire(t, "doonce-crash")
	ctx := context.Background()
	cc, kill := w.killable()
	started := make(chan struct{})
	runnerDone := make(chan error, 1)
	go func() {
		_, err := azlease.DoOnce(ctx, cc, "init",

			nil, func(ctx context.Context, _ azlease.Token) error {
				close(started)
				kill.killed.Store(true)
				<-ctx.Done()
				return context.Cause(ctx)
			})

		runnerDone <- err
	}()
	<-started
	begin := time.Now()
	res, err := azlease.DoOnce(ctx, w.client(), "init", &azlease.DoOnceOptions{PollInterval: 500 * time.Millisecond}, func(context.Context, azlease.Token) error { return nil })

	require.NoError(t, err)
	assert.True(t, res.Ran)
	assert.Equal(t, 2, res.Status.Attempts)
	assert.Less(t, time.Since(begin), 20*time.Second)
	require.ErrorIs(t, <-runnerDone, azlease.ErrLeaseLost)
}

// TestAzuriteElectorEpochSurvivesRecreatedBlob: the container is deleted
// under a running election, as when an in-memory Azurite restarts under a
// fleet. The next leader's epoch is above every earlier one.
func TestAzuriteElectorEpochSurvivesRecreatedBlob(t *testing.T) {
	t.Parallel()
	name := unique("recreate")
	ctx := context.Background()
	cc := azuriteClient(t, name)
	a, err := azlease.NewElector(cc, "leader", &azuriteElectorOpts)
	require.NoError(t, err)
	b, err := azlease.NewElector(azuriteClient(t, name), "leader", &azuriteElectorOpts)
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx, nil))
	waitLeading(t, a, 10*time.Second)
	require.NoError(t, b.Start(ctx, nil))
	first := a.Term().Epoch()
	time.Sleep(1100 * time.Millisecond) // the new blob is created in a later second

	_, err = cc.Delete(raw(ctx), nil)
	require.NoError(t, err)
	var next uint64
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline) && next == 0; time.Sleep(20 * time.Millisecond) {
		for _, e := range []*azlease.Elector{a, b} {
			if tm := e.Term(); tm != nil && tm.Epoch() != first {
				next = tm.Epoch()
			}
		}
	}
	require.NotZero(t, next, "no new leader within 40 s")
	assert.Greater(t, next, first, "the epoch did not go backwards")
	require.NoError(t, a.Stop(ctx))
	require.NoError(t, b.Stop(ctx))
}

// TestAzuriteHoldAfterCreatesTheBlob: on the real wire, Lease.HoldAfter
// with a status that says the blob does not exist creates it with its
// first epoch record and acquires it in two requests (the acquisition's
// answer carries the creation's ETag), another taker's creation then fails
// and it leaves the blob (ErrLeaseHeld), and the term writes and releases
// as any other.
func TestAzuriteHoldAfterCreatesTheBlob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWire(t, "holdafter")
	var sent atomic.Int32
	cc := w.lossy(func(*http.Request) bool { sent.Add(1); return false })
	obs := w.client()
	_, err := obs.Create(ctx, nil)
	if !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		require.NoError(t, err)
	}
	a := newLease(t, cc, "fresh", &azlease.LeaseOptions{Identity: "node-a"})
	sent.Store(0)
	lk, err := a.HoldAfter(ctx, azlease.Status{Name: "fresh"})
	require.NoError(t, err)
	assert.Equal(t, int32(2), sent.Load(), "Put Blob, Acquire Lease")
	st, err := azlease.Inspect(ctx, obs, "fresh")
	require.NoError(t, err)
	assert.Equal(t, lk.Epoch(), st.Epoch)
	assert.Equal(t, "node-a", st.Holder)
	assert.True(t, st.Leased)
	assert.Equal(t, azlease.ChangeFree, st.Began)
	// Another taker whose listing did not show the blob either: its
	// creation fails, and it leaves the blob to its creator.
	other := newLease(t, obs, "fresh", &azlease.LeaseOptions{Identity: "node-c"})
	_, err = other.HoldAfter(ctx, azlease.Status{Name: "fresh"})
	require.ErrorIs(t, err, azlease.ErrLeaseHeld)
	require.NoError(t, lk.SetMetadata(ctx, map[string]string{"checkpoint": "1"}))
	require.NoError(t, lk.Write(ctx, []byte("state")))
	require.NoError(t, lk.Unlock(ctx))
	b := newLease(t, obs, "fresh", &azlease.LeaseOptions{Identity: "node-b"})
	lb, err := b.Hold(ctx)
	require.NoError(t, err)
	assert.Greater(t, lb.Epoch(), lk.Epoch())
	require.NoError(t, lb.Unlock(ctx))
}
