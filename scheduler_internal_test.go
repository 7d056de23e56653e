package azlease

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
)

// schedEmu returns an emulator and a container client on it, made inside
// the calling synctest bubble.
func schedEmu(t *testing.T) (*azleasetest.Server, *container.Client) {
	t.Helper()
	s := azleasetest.New(nil)
	t.Cleanup(s.Close)
	cc, err := s.ContainerClient("locks", "a")
	require.NoError(t, err)
	return s, cc
}

// renewLog records when each blob's renewals reach the emulator.
type renewLog struct {
	mu  sync.Mutex
	at  map[string][]time.Time
	n   atomic.Int64
	out func(azleasetest.Request) azleasetest.Fault // the fault for each renewal; nil passes
}

func (r *renewLog) hook(req azleasetest.Request) azleasetest.Fault {
	if req.Op != azleasetest.OpRenewLease {
		return azleasetest.Fault{}
	}
	r.n.Add(1)
	r.mu.Lock()
	if r.at == nil {
		r.at = make(map[string][]time.Time)
	}
	r.at[req.Blob] = append(r.at[req.Blob], time.Now())
	r.mu.Unlock()
	if r.out != nil {
		return r.out(req)
	}
	return azleasetest.Fault{}
}

func (r *renewLog) times(blob string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at[blob]...)
}

// TestSchedulerHoldsManyLocks: 2,000 locks held on one client for four lease
// durations all stay held, each renewed at least every RenewInterval (5 s),
// spread rather than in a burst, and the process has a constant number of
// goroutines between renewals, not one or two per lock.
func TestSchedulerHoldsManyLocks(t *testing.T) {
	const n = 2000
	if testing.Short() {
		t.Skip("2,000 locks: a few seconds with -race")
	}
	synctest.Test(t, func(t *testing.T) {
		s, cc := schedEmu(t)
		var rl renewLog
		s.SetFaults(rl.hook)
		ctx := context.Background()
		base := settledGoroutines()

		locks := make([]*Lock, n)
		for i := range locks {
			m, err := NewMutex(cc, fmt.Sprintf("lock-%04d", i), nil)
			require.NoError(t, err)
			lock, ok, err := m.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			locks[i] = lock
		}
		start := time.Now()
		held := settledGoroutines() - base
		t.Logf("goroutines with %d locks held: %d more than before", n, held)
		assert.Less(t, held, 50, "goroutines do not grow with the number of held locks")

		for range 60 { // 60 s: four lease durations, sampled each second
			time.Sleep(time.Second)
			g := settledGoroutines() - base
			require.Less(t, g, 50, "goroutines between renewals at %v", time.Since(start))
		}
		for i, lock := range locks {
			require.True(t, lock.Valid(), "lock %d", i)
			require.NoError(t, lock.Err())
		}
		// Every lock renewed within every 5 s; the first renewals were
		// spread over [2.5 s, 5 s] after the grant.
		var firstMin, firstMax time.Duration = time.Hour, 0
		for i := range locks {
			at := rl.times(fmt.Sprintf("lock-%04d", i))
			require.GreaterOrEqual(t, len(at), 12, "lock %d renewed %d times in 60 s", i, len(at))
			first := at[0].Sub(start)
			firstMin, firstMax = min(firstMin, first), max(firstMax, first)
			prev := at[0]
			for _, a := range at[1:] {
				gap := a.Sub(prev)
				require.GreaterOrEqual(t, gap, 4500*time.Millisecond, "lock %d", i)
				require.LessOrEqual(t, gap, 5*time.Second, "lock %d", i)
				prev = a
			}
		}
		assert.GreaterOrEqual(t, firstMin, 2500*time.Millisecond)
		assert.Less(t, firstMin, 3*time.Second, "first renewals spread from 2.5 s")
		assert.Greater(t, firstMax, 4500*time.Millisecond, "… to 5 s")
		assert.LessOrEqual(t, firstMax, 5*time.Second)

		for _, lock := range locks {
			require.NoError(t, lock.Unlock(ctx))
		}
		synctest.Wait()
		assert.LessOrEqual(t, settledGoroutines(), base, "nothing left behind")
		lim := limiterFor(cc)
		lim.mu.Lock()
		assert.Zero(t, lim.running)
		assert.Nil(t, lim.head)
		lim.mu.Unlock()
	})
}

// settledGoroutines waits until every goroutine of the bubble is blocked and
// counts the process's goroutines.
func settledGoroutines() int {
	synctest.Wait()
	return runtime.NumGoroutine()
}

// TestSchedulerHungRenewalsDelayNoOther: the renewals of 40 locks hang (more
// than the limiter runs at once). Each of them ends at its own validity
// deadline, exactly; the other locks are renewed no more than
// renewOverflowAfter late, because renewals stuck in the queue start anyway,
// and they stay held throughout.
func TestSchedulerHungRenewalsDelayNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, cc := schedEmu(t)
		const hung, healthy = renewConcurrency + 8, 60
		rl := renewLog{out: func(r azleasetest.Request) azleasetest.Fault {
			if len(r.Blob) > 5 && r.Blob[:5] == "hung-" {
				return azleasetest.Fault{Action: azleasetest.Hang}
			}
			return azleasetest.Fault{}
		}}
		s.SetFaults(rl.hook)
		ctx := context.Background()
		take := func(name string) *Lock {
			m, err := NewMutex(cc, name, nil)
			require.NoError(t, err)
			lock, ok, err := m.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			return lock
		}
		var hungLocks, okLocks []*Lock
		for i := range hung {
			hungLocks = append(hungLocks, take(fmt.Sprintf("hung-%02d", i)))
		}
		time.Sleep(time.Second) // the healthy ones come due while the hung ones hang
		for i := range healthy {
			okLocks = append(okLocks, take(fmt.Sprintf("ok-%02d", i)))
		}
		start := time.Now()

		ended := make(chan struct{})
		var wg sync.WaitGroup
		for _, lock := range hungLocks {
			deadline := lock.ValidUntil()
			wg.Go(func() {
				<-lock.Done()
				assert.True(t, deadline.Equal(time.Now()), "the deadline timer ended the term on time")
				assert.ErrorIs(t, lock.Err(), ErrDeadlinePassed)
			})
		}
		go func() { wg.Wait(); close(ended) }()

		time.Sleep(45 * time.Second)
		select {
		case <-ended:
		default:
			t.Fatal("a hung lock's term outlived its deadline")
		}
		for i, lock := range okLocks {
			require.True(t, lock.Valid(), "healthy lock %d", i)
			at := rl.times(fmt.Sprintf("ok-%02d", i))
			require.NotEmpty(t, at)
			require.LessOrEqual(t, at[0].Sub(start), 5*time.Second+renewOverflowAfter, "healthy lock %d: first renewal", i)
			for j := 1; j < len(at); j++ {
				require.LessOrEqual(t, at[j].Sub(at[j-1]), 5*time.Second+renewOverflowAfter, "healthy lock %d: renewal %d", i, j)
			}
		}
		lim := limiterFor(cc)
		lim.mu.Lock()
		overflowed := lim.overflowed
		lim.mu.Unlock()
		assert.Positive(t, overflowed, "renewals stuck behind the hung ones started anyway")
		t.Logf("renewals started beyond the limit after waiting %v: %d", renewOverflowAfter, overflowed)

		for _, lock := range append(hungLocks, okLocks...) {
			_ = lock.Unlock(ctx)
		}
	})
}

// TestSchedulerOverflowIsCapped: a storage account that answers every
// request after a second, and 250 locks taken at once, so their renewals
// come due faster than renewConcurrency workers can serve them (about 50 a
// second against 32). Renewals that wait start anyway, but never more than
// renewMaxInFlight at once (the connections the transport keeps), and every
// lock stays held.
func TestSchedulerOverflowIsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, cc := schedEmu(t)
		ctx := context.Background()
		const n = 250
		locks := make([]*Lock, n)
		for i := range locks {
			m, err := NewMutex(cc, fmt.Sprintf("slow-%03d", i), nil)
			require.NoError(t, err)
			lock, ok, err := m.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			locks[i] = lock
		}
		s.SetFaults(func(azleasetest.Request) azleasetest.Fault {
			return azleasetest.Fault{Delay: time.Second}
		})
		time.Sleep(60 * time.Second)
		for i, lock := range locks {
			require.True(t, lock.Valid(), "lock %d", i)
		}
		lim := limiterFor(cc)
		lim.mu.Lock()
		peak, overflowed := lim.peak, lim.overflowed
		lim.mu.Unlock()
		assert.Positive(t, overflowed, "renewals that waited started beyond renewConcurrency")
		assert.Equal(t, renewMaxInFlight, peak, "renewals in flight at once: up to the cap, never more")
		t.Logf("peak renewals in flight %d (cap %d), %d started by overflow", peak, renewMaxInFlight, overflowed)
		s.SetFaults(nil)
		for _, lock := range locks {
			require.NoError(t, lock.Unlock(ctx))
		}
	})
}

// TestSchedulerStopWaitsForTheRenewal: stop returns only after the keeper's
// renewal in flight has finished, and nothing of the keeper runs afterwards.
// A renewal still queued when stop is called never runs.
func TestSchedulerStopWaitsForTheRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, cc := schedEmu(t)
		var rl renewLog
		s.SetFaults(rl.hook)
		ctx := context.Background()
		m, err := NewMutex(cc, "m", nil)
		require.NoError(t, err)
		acquire := func() (*Lease, Token) {
			l := m.newLease()
			tok, err := l.Acquire(ctx)
			require.NoError(t, err)
			return l, tok
		}

		// One renewal blocked in its hook: stop waits for it.
		entered, release := make(chan struct{}), make(chan struct{})
		l, tok := acquire()
		k := hold(ctx, l, tok, 5*time.Second, func() {
			close(entered)
			<-release
		})
		<-entered
		stopped := make(chan struct{})
		go func() {
			k.stop(ErrStopped)
			close(stopped)
		}()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("stop returned while the renewal was running")
		default:
		}
		require.ErrorIs(t, k.term.Err(), ErrStopped, "the term ends at once")
		close(release)
		<-stopped
		require.NoError(t, l.Release(ctx))

		// Fill the limiter with blocked renewals, queue one more, stop
		// it: it returns at once and its renewal never runs.
		release = make(chan struct{})
		var started sync.WaitGroup
		blockers := make([]*keeper, renewConcurrency)
		for i := range blockers {
			l, tok := acquire2(t, cc, fmt.Sprintf("b-%02d", i))
			started.Add(1)
			blockers[i] = hold(ctx, l, tok, 5*time.Second, func() {
				started.Done()
				<-release
			})
		}
		started.Wait() // all first renewals run, blocked: the limiter is full
		l, tok = acquire()
		ran := atomic.Bool{}
		k = hold(ctx, l, tok, 100*time.Millisecond, func() { ran.Store(true) })
		time.Sleep(100 * time.Millisecond) // due; the limiter is full
		synctest.Wait()
		k.mu.Lock()
		phase := k.phase
		k.mu.Unlock()
		require.Equal(t, phaseQueued, phase)
		k.stop(ErrStopped)
		time.Sleep(5 * time.Second) // past renewOverflowAfter
		assert.False(t, ran.Load(), "a renewal stopped while queued never runs")
		close(release)
		for _, b := range blockers {
			b.stop(ErrStopped)
		}
		require.NoError(t, l.Release(ctx))
	})
}

// acquire2 acquires a lease on blob with the default options.
func acquire2(t *testing.T, cc *container.Client, blob string) (*Lease, Token) {
	t.Helper()
	l, err := NewLease(cc, blob, nil)
	require.NoError(t, err)
	tok, err := l.Acquire(context.Background())
	require.NoError(t, err)
	return l, tok
}

// TestSchedulerLimiterPerClient: each container client has its own
// limiter, and a client that is no longer used drops it.
func TestSchedulerLimiterPerClient(t *testing.T) {
	s := azleasetest.New(nil)
	defer s.Close()
	a, err := s.ContainerClient("locks", "a")
	require.NoError(t, err)
	b, err := s.ContainerClient("locks", "b")
	require.NoError(t, err)
	require.Same(t, limiterFor(a), limiterFor(a))
	require.NotSame(t, limiterFor(a), limiterFor(b))
	count := func() int {
		renewLimiters.mu.Lock()
		defer renewLimiters.mu.Unlock()
		return len(renewLimiters.m)
	}
	before := count()
	a = nil // dropped, for the garbage collector
	for i := 0; i < 100 && count() >= before; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	assert.Less(t, count(), before, "the limiter of a dropped client is freed")
	runtime.KeepAlive(b)
}

// TestDefaultTransportKeepsConnections: a client made without a transport
// gets one that keeps more idle connections than renewals run at once; a
// transport of the caller's is kept, and the caller's options are not
// changed.
func TestDefaultTransportKeepsConnections(t *testing.T) {
	require.Greater(t, maxIdleConnsPerHost, renewConcurrency)
	for _, opts := range []*container.ClientOptions{nil, {}} {
		o := withTransport(opts)
		hc, ok := o.Transport.(*http.Client)
		require.True(t, ok)
		tr, ok := hc.Transport.(*http.Transport)
		require.True(t, ok)
		assert.Equal(t, maxIdleConnsPerHost, tr.MaxIdleConnsPerHost)
		assert.GreaterOrEqual(t, tr.MaxIdleConns, maxIdleConnsPerHost)
		assert.Same(t, hc, withTransport(nil).Transport, "one transport, shared")
		if opts != nil {
			assert.Nil(t, opts.Transport, "the caller's options are not changed")
		}
	}
	mine := &http.Client{}
	opts := &container.ClientOptions{}
	opts.Transport = mine
	assert.Same(t, mine, withTransport(opts).Transport)
}
