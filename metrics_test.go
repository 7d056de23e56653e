package azlease_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// meters is an OpenTelemetry SDK meter provider with a manual reader: the
// tests collect from it and read what each instrument reported.
type meters struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMeters(t *testing.T) *meters {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &meters{t: t, reader: r, mp: mp}
}

// find collects and returns the metric called name (ok false if nothing was
// reported for it).
func (m *meters) find(name string) (metricdata.Metrics, bool) {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(m.t, m.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name == name {
				require.Equal(m.t, "github.com/azlease/azlease", sm.Scope.Name)
				return mt, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// has reports whether set includes every one of kvs.
func has(set attribute.Set, kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// count sums the counter name over the points that carry kvs.
func (m *meters) count(name string, kvs ...attribute.KeyValue) int64 {
	m.t.Helper()
	mt, ok := m.find(name)
	if !ok {
		return 0
	}
	sum, isSum := mt.Data.(metricdata.Sum[int64])
	require.True(m.t, isSum, "%s is a counter", name)
	assert.True(m.t, sum.IsMonotonic, name)
	var n int64
	for _, p := range sum.DataPoints {
		if has(p.Attributes, kvs) {
			n += p.Value
		}
	}
	return n
}

// hist sums the histogram name's counts and values over the points that
// carry kvs.
func (m *meters) hist(name string, kvs ...attribute.KeyValue) (n uint64, sum, lo, hi float64) {
	m.t.Helper()
	mt, ok := m.find(name)
	if !ok {
		return 0, 0, 0, 0
	}
	h, isHist := mt.Data.(metricdata.Histogram[float64])
	require.True(m.t, isHist, "%s is a histogram", name)
	lo, hi = 1e9, -1e9
	for _, p := range h.DataPoints {
		if has(p.Attributes, kvs) {
			n += p.Count
			sum += p.Sum
			if v, ok := p.Min.Value(); ok {
				lo = min(lo, v)
			}
			if v, ok := p.Max.Value(); ok {
				hi = max(hi, v)
			}
		}
	}
	return n, sum, lo, hi
}

// gauge returns the gauge name's value on the point that carries kvs.
func (m *meters) gauge(name string, kvs ...attribute.KeyValue) (int64, bool) {
	m.t.Helper()
	mt, ok := m.find(name)
	if !ok {
		return 0, false
	}
	g, isGauge := mt.Data.(metricdata.Gauge[int64])
	require.True(m.t, isGauge, "%s is a gauge", name)
	for _, p := range g.DataPoints {
		if has(p.Attributes, kvs) {
			return p.Value, true
		}
	}
	return 0, false
}

// requests lists the request outcomes reported, as "operation/outcome=count".
func (m *meters) requests() []string {
	m.t.Helper()
	mt, ok := m.find("azlease.request.duration")
	if !ok {
		return nil
	}
	var out []string
	for _, p := range mt.Data.(metricdata.Histogram[float64]).DataPoints {
		op, _ := p.Attributes.Value("azlease.operation")
		oc, _ := p.Attributes.Value("azlease.outcome")
		out = append(out, fmt.Sprintf("%s/%s=%d", op.AsString(), oc.AsString(), p.Count))
	}
	slices.Sort(out)
	return out
}

func kv(k, v string) attribute.KeyValue { return attribute.String(k, v) }

var (
	roleElector = kv("azlease.role", "elector")
	roleMutex   = kv("azlease.role", "mutex")
	roleOnce    = kv("azlease.role", "once")
)

func cause(c string) attribute.KeyValue { return kv("azlease.term.end_cause", c) }
func op(o string) attribute.KeyValue    { return kv("azlease.operation", o) }
func outcome(o string) attribute.KeyValue {
	return kv("azlease.outcome", o)
}

// waitLeader waits (bounded) until el leads.
func waitLeader(t *testing.T, el *azlease.Elector) {
	t.Helper()
	for range 100 {
		if el.IsLeader() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("never became leader")
}

// blockUntilDone is a leader task that works until its term ends.
func blockUntilDone(ctx context.Context, _ *azlease.Term) error {
	<-ctx.Done()
	return nil
}

// TestMetricsElectorTerm: an Elector that acquires, renews and releases
// reports one term started and one ended (stopped), its leadership while it
// leads, no failures, each renewal's slack, and every request by operation.
func TestMetricsElectorTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		m := newMeters(t)
		el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{MeterProvider: m.mp})
		require.NoError(t, err)
		lock := kv("azlease.lock", "locks/leader")

		require.NoError(t, el.Start(context.Background(), blockUntilDone))
		waitLeader(t, el)
		leading, ok := m.gauge("azlease.elector.leader", lock)
		assert.True(t, ok)
		assert.Equal(t, int64(1), leading)
		failures, ok := m.gauge("azlease.failures.consecutive", lock)
		assert.True(t, ok)
		assert.Zero(t, failures)
		assert.Equal(t, int64(1), m.count("azlease.term.starts", roleElector, lock))
		assert.Zero(t, m.count("azlease.term.ends"))

		time.Sleep(31 * time.Second) // six or seven renewals, every 5 s at most
		n, sum, lo, hi := m.hist("azlease.renewal.slack", lock)
		// The first renewal comes 2.5–5 s after the grant, later ones
		// 4.5–5 s after the last (jitter, so that many leases do not renew
		// at once). Each lands instantly, in the bubble, after the last
		// grant, which left 15 s − 5 % = 14.25 s: 9.25 s remain, or more.
		assert.Contains(t, []uint64{6, 7}, n)
		renewals := n
		assert.GreaterOrEqual(t, lo, 9.25-1e-6)
		assert.LessOrEqual(t, hi, 11.75+1e-6)
		assert.InDelta(t, sum, float64(n)*(lo+hi)/2, float64(n)*(hi-lo)/2+1e-6)

		require.NoError(t, el.Stop(context.Background()))
		assert.Equal(t, int64(1), m.count("azlease.term.ends", roleElector, cause("stopped"), lock))
		assert.Equal(t, int64(1), m.count("azlease.term.ends"), "each term ends once")
		_, ok = m.gauge("azlease.elector.leader")
		assert.False(t, ok, "a stopped Elector is no longer reported")

		reqs := m.requests()
		for _, want := range []string{"acquire/ok=1", fmt.Sprintf("renew/ok=%d", renewals), "release/ok=1"} {
			assert.Contains(t, reqs, want)
		}
		for _, r := range reqs {
			assert.Contains(t, r, "/ok=", "nothing failed: %v", reqs)
		}
		n, sum, _, _ = m.hist("azlease.request.duration", op("renew"), outcome("ok"))
		assert.Equal(t, renewals, n, "one request per renewal")
		assert.Zero(t, sum, "requests are instant in the bubble")
	})
}

// TestMetricsTermEndCauses: a term that loses its lease, one whose renewals
// fail until the deadline, and one whose renewals hang (its holder checking
// after the deadline) each end once, with their cause; failed renewals show
// as consecutive failures and as request outcomes. (A term found expired by
// its holder before any azlease goroutine ran: metrics_internal_test.go.)
func TestMetricsTermEndCauses(t *testing.T) {
	t.Run("lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEmu(t)
			m := newMeters(t)
			el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{MeterProvider: m.mp})
			require.NoError(t, err)
			require.NoError(t, el.Start(context.Background(), blockUntilDone))
			waitLeader(t, el)
			// Another holder broke in: Azure refuses the renewal's lease ID.
			e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
				if r.Op == azleasetest.OpRenewLease {
					return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusConflict, Code: "LeaseIdMismatchWithLeaseOperation"}
				}
				return azleasetest.Fault{}
			})
			time.Sleep(6 * time.Second)
			assert.False(t, el.IsLeader())
			assert.Equal(t, int64(1), m.count("azlease.term.ends", roleElector, cause("lost")))
			assert.Contains(t, m.requests(), "renew/lost=1")
			e.SetFaults(nil)
			require.NoError(t, el.Stop(context.Background()))
			assert.Equal(t, m.count("azlease.term.starts"), m.count("azlease.term.ends"), "every term ends once")
		})
	})
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEmu(t)
			m := newMeters(t)
			el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{MeterProvider: m.mp})
			require.NoError(t, err)
			require.NoError(t, el.Start(context.Background(), blockUntilDone))
			waitLeader(t, el)
			e.SetFaults(func(azleasetest.Request) azleasetest.Fault {
				return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusServiceUnavailable, Code: "ServerBusy"}
			})
			time.Sleep(15 * time.Second) // past the deadline, 14.25 s after the acquisition
			assert.False(t, el.IsLeader())
			assert.Equal(t, int64(1), m.count("azlease.term.ends", roleElector, cause("deadline")))
			failures, _ := m.gauge("azlease.failures.consecutive")
			assert.GreaterOrEqual(t, failures, int64(3))
			n, _, _, _ := m.hist("azlease.request.duration", op("renew"), outcome("transient"))
			assert.GreaterOrEqual(t, n, uint64(3))
			e.SetFaults(nil)
			require.NoError(t, el.Stop(context.Background()))
			assert.Equal(t, m.count("azlease.term.starts"), m.count("azlease.term.ends"), "every term ends once")
		})
	})
	t.Run("hang", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEmu(t)
			m := newMeters(t)
			mu, err := azlease.NewMutex(e.client("a"), "m", &azlease.MutexOptions{MeterProvider: m.mp})
			require.NoError(t, err)
			lk, err := mu.Lock(context.Background())
			require.NoError(t, err)
			// Nothing answers the renewals; the holder checks its lock
			// after the deadline has passed.
			e.SetFaults(func(azleasetest.Request) azleasetest.Fault { return azleasetest.Fault{Action: azleasetest.Hang} })
			time.Sleep(20 * time.Second)
			require.ErrorIs(t, lk.Err(), azlease.ErrDeadlinePassed)
			require.ErrorIs(t, lk.Context().Err(), context.Canceled)
			e.SetFaults(nil)
			_ = lk.Unlock(context.Background())
			assert.Equal(t, int64(1), m.count("azlease.term.starts", roleMutex))
			assert.Equal(t, int64(1), m.count("azlease.term.ends", roleMutex, cause("deadline")))
			assert.Equal(t, int64(1), m.count("azlease.term.ends"), "each term ends once")
		})
	})
}

// TestMetricsMutexWait: Lock's wait is reported by outcome, and each lock is
// a term of the mutex role.
func TestMetricsMutexWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		m := newMeters(t)
		// Unordered: the wait's bound below is one poll interval.
		opts := &azlease.MutexOptions{MeterProvider: m.mp, MetricsWithoutLockName: true, Unordered: true}
		a, err := azlease.NewMutex(e.client("a"), "m", opts)
		require.NoError(t, err)
		b, err := azlease.NewMutex(e.client("b"), "m", opts)
		require.NoError(t, err)

		la, err := a.Lock(context.Background())
		require.NoError(t, err)
		got := make(chan *azlease.Lock, 1)
		go func() {
			lb, err := b.Lock(context.Background())
			assert.NoError(t, err)
			got <- lb
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = b.Lock(ctx)
		cancel()
		require.Error(t, err)
		time.Sleep(5 * time.Second)
		require.NoError(t, la.Unlock(context.Background()))
		lb := <-got
		require.NoError(t, lb.Unlock(context.Background()))

		n, sum, _, _ := m.hist("azlease.mutex.wait.duration", outcome("acquired"))
		assert.Equal(t, uint64(2), n)
		assert.GreaterOrEqual(t, sum, 7.0, "the second waited from 0 s until after the first unlocked at 7 s")
		assert.LessOrEqual(t, sum, 7.0+1.2, "within a poll interval (1 s) and its jitter (20 %)")
		n, sum, _, _ = m.hist("azlease.mutex.wait.duration", outcome("canceled"))
		assert.Equal(t, uint64(1), n)
		assert.InDelta(t, 2.0, sum, 1e-9)
		assert.Equal(t, int64(2), m.count("azlease.term.starts", roleMutex))
		assert.Equal(t, int64(2), m.count("azlease.term.ends", roleMutex, cause("stopped")))

		mt, ok := m.find("azlease.mutex.wait.duration")
		require.True(t, ok)
		for _, p := range mt.Data.(metricdata.Histogram[float64]).DataPoints {
			_, named := p.Attributes.Value("azlease.lock")
			assert.False(t, named, "MetricsWithoutLockName leaves the lock's name off")
		}
	})
}

// TestMetricsRequestOutcomes: each request is reported with its outcome's
// class: ok, transient (retried), held, permanent.
func TestMetricsRequestOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		m := newMeters(t)
		opts := &azlease.LeaseOptions{MeterProvider: m.mp}
		var busy atomic.Int64
		busy.Store(2)
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpAcquireLease && busy.Add(-1) >= 0 {
				return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusServiceUnavailable, Code: "ServerBusy"}
			}
			return azleasetest.Fault{}
		}))
		a := newLease(t, e.client("a"), "x", opts)
		_, err := a.Acquire(context.Background())
		require.NoError(t, err)

		b := newLease(t, e.client("b"), "x", opts)
		_, err = b.Acquire(context.Background())
		require.ErrorIs(t, err, azlease.ErrLeaseHeld)

		e.SetFaults(faultsFor("c", authFailed))
		c := newLease(t, e.client("c"), "x", opts)
		_, err = c.Acquire(context.Background())
		require.ErrorIs(t, err, azlease.ErrPermanent)

		reqs := m.requests()
		for _, want := range []string{"acquire/transient=2", "acquire/held=1", "acquire/permanent=1"} {
			assert.Contains(t, reqs, want)
		}
		assert.Equal(t, uint64(0), func() uint64 { n, _, _, _ := m.hist("azlease.renewal.slack"); return n }())
		assert.Zero(t, m.count("azlease.term.starts"), "a bare Lease has no Term")
		require.NoError(t, a.Release(context.Background()))
	})
}

// TestMetricsOnceCalls: DoOnce calls are counted by outcome, and the run is
// a term of the once role.
func TestMetricsOnceCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		m := newMeters(t)
		opts := &azlease.DoOnceOptions{MeterProvider: m.mp}
		fn := func(context.Context, azlease.Token) error { return nil }
		_, err := azlease.DoOnce(context.Background(), e.client("a"), "k", opts, fn)
		require.NoError(t, err)
		_, err = azlease.DoOnce(context.Background(), e.client("b"), "k", opts, fn)
		require.NoError(t, err)
		_, err = azlease.DoOnce(context.Background(), e.client("c"), "failing", opts,
			func(context.Context, azlease.Token) error { return errors.New("boom") })
		require.Error(t, err)
		once := func(o string) int64 { return m.count("azlease.once.calls", kv("azlease.once.outcome", o)) }
		assert.Equal(t, int64(1), once("ran"))
		assert.Equal(t, int64(1), once("done_elsewhere"))
		assert.Equal(t, int64(1), once("failed"))
		assert.Equal(t, int64(2), m.count("azlease.term.starts", roleOnce))
		assert.Equal(t, int64(2), m.count("azlease.term.ends", roleOnce, cause("stopped")))
	})
}

// TestMetricsUnreachableElector: an Elector that cannot reach storage
// reports that it does not lead and how many requests failed in a row.
func TestMetricsUnreachableElector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMeters(t)
		el, err := azlease.NewElector(failingClient(t, refusing()), "leader", &azlease.ElectorOptions{MeterProvider: m.mp})
		require.NoError(t, err)
		require.NoError(t, el.Start(context.Background(), blockUntilDone))
		time.Sleep(10 * time.Second)
		leading, ok := m.gauge("azlease.elector.leader")
		assert.True(t, ok)
		assert.Zero(t, leading)
		failures, _ := m.gauge("azlease.failures.consecutive")
		assert.GreaterOrEqual(t, failures, int64(3))
		require.NoError(t, el.Stop(context.Background()))
	})
}

// TestLibraryDependencies: the library imports the OpenTelemetry metric API
// only, never an SDK or exporter, and neither Prometheus nor the command's
// CLI framework.
func TestLibraryDependencies(t *testing.T) {
	// go test puts the go command that runs it first on PATH.
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "go.opentelemetry.io/otel/metric", "the list is the library's")
	for _, d := range deps {
		for _, banned := range []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "github.com/prometheus/", "github.com/spf13/cobra"} {
			assert.False(t, strings.HasPrefix(d, banned), "the library depends on %s", d)
		}
	}
}

// TestMetricsCollectionDuringStart: a collection (a Prometheus scrape, say)
// that runs while an Elector starts neither waits for the start nor blocks
// it. The SDK runs the callbacks under its own lock, which registering a
// callback takes too; the Elector's callbacks read its state under its
// mutex, so Start must not hold that mutex while it registers them. (Found
// as a hung scrape in examples/metrics: Start held the mutex while it
// registered its second callback, and a scrape that had entered the first
// one waited for the mutex.) The provider below makes the two meet: the
// second registration waits until a collection is inside the first callback.
func TestMetricsCollectionDuringStart(t *testing.T) {
	e := newEmu(t)
	m := newMeters(t)
	mp := &meetingProvider{MeterProvider: m.mp, reader: m.reader, inFirst: make(chan struct{})}
	el, err := azlease.NewElector(e.client("a"), "leader", &azlease.ElectorOptions{MeterProvider: mp})
	require.NoError(t, err)

	started := make(chan error, 1)
	go func() { started <- el.Start(context.Background(), blockUntilDone) }()
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return in 10 s: it waits for a collection that waits for it")
	}
	select {
	case err := <-mp.collected:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the collection did not finish in 10 s")
	}
	select {
	case <-mp.inFirst:
	default:
		t.Fatal("the collection never ran the first callback: the test did not make the two meet")
	}
	require.NoError(t, el.Stop(context.Background()))
}

// meetingProvider wraps an SDK meter provider. The second callback
// registered through it is registered only once a collection, started
// then, is inside the first one (or after 5 s).
type meetingProvider struct {
	metric.MeterProvider
	reader    *sdkmetric.ManualReader
	n         atomic.Int32
	once      sync.Once
	inFirst   chan struct{}
	collected chan error
}

func (p *meetingProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return &meetingMeter{Meter: p.MeterProvider.Meter(name, opts...), p: p}
}

type meetingMeter struct {
	metric.Meter
	p *meetingProvider
}

func (m *meetingMeter) RegisterCallback(cb metric.Callback, insts ...metric.Observable) (metric.Registration, error) {
	switch m.p.n.Add(1) {
	case 1:
		inner := cb
		cb = func(ctx context.Context, o metric.Observer) error {
			m.p.once.Do(func() { close(m.p.inFirst) })
			return inner(ctx, o)
		}
	case 2:
		m.p.collected = make(chan error, 1)
		go func() {
			var rm metricdata.ResourceMetrics
			m.p.collected <- m.p.reader.Collect(context.Background(), &rm)
		}()
		select {
		case <-m.p.inFirst:
		case <-time.After(5 * time.Second):
		}
	}
	return m.Meter.RegisterCallback(cb, insts...)
}
