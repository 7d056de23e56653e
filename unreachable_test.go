package azlease_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// Issue 19 item 3: callers that wait on storage (Mutex.Lock,
// Semaphore.Acquire, DoOnce) learn that it is unreachable, through
// UnreachableTimeout, without ending their own context.

// sasClient is a client of an unreachable endpoint whose URL carries a SAS
// token, which no error may repeat.
func sasClient(t *testing.T) *container.Client {
	t.Helper()
	cc, err := container.NewClientWithNoCredential("http://127.0.0.1:9/devstoreaccount1/locks?sv=2024-01-01&sig=SECRETSIG",
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: refusing()}})
	require.NoError(t, err)
	return cc
}

// requireUnreachable checks the error of a wait that storage never
// answered: ErrUnreachable (so ErrTransient), the endpoint without its SAS
// token, the last failure, and how long.
func requireUnreachable(t *testing.T, err error, elapsed, bound time.Duration) {
	t.Helper()
	require.ErrorIs(t, err, azlease.ErrUnreachable)
	require.ErrorIs(t, err, azlease.ErrTransient)
	var e *azlease.Error
	require.ErrorAs(t, err, &e, "the last failure is kept")
	msg := err.Error()
	assert.Contains(t, msg, "http://127.0.0.1:9/devstoreaccount1/locks?<redacted>")
	assert.NotContains(t, msg, "SECRETSIG")
	assert.Contains(t, msg, "connection refused")
	assert.Contains(t, msg, "in a row")
	assert.GreaterOrEqual(t, elapsed, bound)
	assert.Less(t, elapsed, bound+20*time.Second, "within one try of the bound")
}

func TestMutexLockUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  azlease.MutexOptions
		bound time.Duration
	}{
		{"default", azlease.MutexOptions{}, time.Minute},
		{"5s", azlease.MutexOptions{UnreachableTimeout: 5 * time.Second}, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, err := azlease.NewMutex(sasClient(t), "m", &tc.opts)
				require.NoError(t, err)
				start := time.Now()
				_, err = m.Lock(context.Background())
				requireUnreachable(t, err, time.Since(start), tc.bound)
				assert.Contains(t, err.Error(), "lock locks/m")
			})
		})
	}
}

func TestSemaphoreAcquireUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := azlease.NewSemaphore(sasClient(t), "s", 3, &azlease.MutexOptions{UnreachableTimeout: 10 * time.Second})
		require.NoError(t, err)
		start := time.Now()
		_, err = s.Acquire(context.Background())
		requireUnreachable(t, err, time.Since(start), 10*time.Second)
		assert.Contains(t, err.Error(), "semaphore s (3 slots)")
	})
}

func TestDoOnceWaitUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		_, err := azlease.DoOnce(context.Background(), sasClient(t), "k", nil, func(context.Context, azlease.Token) error {
			t.Error("fn ran without storage")
			return nil
		})
		requireUnreachable(t, err, time.Since(start), time.Minute)
		assert.Contains(t, err.Error(), `once "k"`)
	})
}

// TestUnreachableNegativeMeansNoBound: with a negative UnreachableTimeout,
// waiting goes on until ctx ends, and the error says so, with the last
// attempt once (not twice, as Lock's used to).
func TestUnreachableNegativeMeansNoBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		m, err := azlease.NewMutex(sasClient(t), "m", &azlease.MutexOptions{UnreachableTimeout: -1})
		require.NoError(t, err)
		_, err = m.Lock(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, azlease.ErrUnreachable)
		assert.Equal(t, 1, strings.Count(err.Error(), "last attempt"), err.Error())
		assert.Contains(t, err.Error(), "connection refused")

		s, err := azlease.NewSemaphore(sasClient(t), "s", 2, &azlease.MutexOptions{UnreachableTimeout: -time.Second})
		require.NoError(t, err)
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_, err = s.Acquire(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1, strings.Count(err.Error(), "last attempt"), err.Error())

		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_, err = azlease.DoOnce(ctx, sasClient(t), "k", &azlease.DoOnceOptions{UnreachableTimeout: -1}, func(context.Context, azlease.Token) error { return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1, strings.Count(err.Error(), "last attempt"), err.Error())
	})
}

// TestUnreachableIsNotBusy: a lock held elsewhere for longer than the bound
// is not "unreachable": every poll gets an answer.
func TestUnreachableIsNotBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		holder, err := azlease.NewMutex(e.client("a"), "m", nil)
		require.NoError(t, err)
		lk, err := holder.Lock(context.Background())
		require.NoError(t, err)
		opts := &azlease.MutexOptions{UnreachableTimeout: 2 * time.Second}
		waiter, err := azlease.NewMutex(e.client("b"), "m", opts)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err = waiter.Lock(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, azlease.ErrUnreachable)

		require.NoError(t, lk.Unlock(context.Background()))

		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := azlease.DoOnce(context.Background(), e.client("a"), "k", nil, func(context.Context, azlease.Token) error {
				time.Sleep(2 * time.Minute)
				return nil
			})
			assert.NoError(t, err)
		}()
		time.Sleep(time.Second)
		res, err := azlease.DoOnce(context.Background(), e.client("b"), "k", &azlease.DoOnceOptions{UnreachableTimeout: 2 * time.Second},
			func(context.Context, azlease.Token) error { return nil })
		require.NoError(t, err, "a busy key is not an unreachable one")
		assert.False(t, res.Ran)
		<-done
	})
}

// TestUnreachableAfterAnOutage: storage that answered and then stops
// answering (an outage with no answer at all) ends a waiting Lock after
// the bound; once it answers again, Lock works.
func TestUnreachableAfterAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		m, err := azlease.NewMutex(e.client("a"), "m", &azlease.MutexOptions{UnreachableTimeout: 30 * time.Second})
		require.NoError(t, err)
		lk, err := m.Lock(context.Background())
		require.NoError(t, err)
		require.NoError(t, lk.Unlock(context.Background()))

		e.Partition("a", azleasetest.Blackhole)
		start := time.Now()
		_, err = m.Lock(context.Background())
		require.ErrorIs(t, err, azlease.ErrUnreachable)
		assert.Contains(t, err.Error(), "http://127.0.0.1:10000/devstoreaccount1/locks")
		assert.GreaterOrEqual(t, time.Since(start), 30*time.Second)
		e.Heal("a")
		lk, err = m.Lock(context.Background())
		require.NoError(t, err)
		require.NoError(t, lk.Unlock(context.Background()))
	})
}

func TestUnreachableTimeoutBounds(t *testing.T) {
	cc := containerAt(t, "locks")
	for _, d := range []time.Duration{time.Millisecond, 999 * time.Millisecond, 24*time.Hour + 1} {
		_, err := azlease.NewMutex(cc, "m", &azlease.MutexOptions{UnreachableTimeout: d})
		requireOptionError(t, err, "MutexOptions.UnreachableTimeout")
		_, err = azlease.NewSemaphore(cc, "s", 2, &azlease.MutexOptions{UnreachableTimeout: d})
		requireOptionError(t, err, "MutexOptions.UnreachableTimeout")
		_, err = azlease.DoOnce(context.Background(), cc, "k", &azlease.DoOnceOptions{UnreachableTimeout: d}, func(context.Context, azlease.Token) error { return nil })
		requireOptionError(t, err, "DoOnceOptions.UnreachableTimeout")
	}
	for _, d := range []time.Duration{-time.Hour, -1, time.Second, 24 * time.Hour} {
		_, err := azlease.NewMutex(cc, "m", &azlease.MutexOptions{UnreachableTimeout: d})
		require.NoError(t, err, d)
	}
}

// TestHostNotFoundIsNamed: a host name that does not resolve is permanent,
// as before, and now says what it is (ErrEndpointNotFound) instead of
// reading as a refusal by storage.
func TestHostNotFoundIsNamed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &failing{err: &net.DNSError{Err: "no such host", Name: "nosuchaccount.blob.core.windows.net", IsNotFound: true}}
		var logs logBuffer
		m, err := azlease.NewMutex(failingClient(t, tr), "m", &azlease.MutexOptions{Logger: logs.logger()})
		require.NoError(t, err)
		_, err = m.Lock(context.Background())
		require.ErrorIs(t, err, azlease.ErrEndpointNotFound)
		require.ErrorIs(t, err, azlease.ErrPermanent)
		assert.Contains(t, err.Error(), "host name does not resolve")
		assert.Contains(t, err.Error(), "no such host")
		assert.Equal(t, int64(1), tr.requests.Load(), "not retried")
		assert.Equal(t, 1, logs.count("level=ERROR", "does not resolve"), logs.String())

		var elogs logBuffer
		el, err := azlease.NewElector(failingClient(t, tr), "leader", &azlease.ElectorOptions{Logger: elogs.logger()})
		require.NoError(t, err)
		err = el.Run(context.Background(), nil)
		require.ErrorIs(t, err, azlease.ErrEndpointNotFound, "a fleet with a misspelt account fails at start-up")
		assert.Equal(t, 0, elogs.count("refused"), elogs.String())
		assert.Equal(t, 2, elogs.count("level=ERROR", "does not resolve"), elogs.String())
	})
}
