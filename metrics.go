package azlease

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// azlease reports OpenTelemetry metrics through the metric API only: it never
// installs an SDK or an exporter. Each options struct takes a MeterProvider;
// nil means the global one (otel.GetMeterProvider), which records nothing
// until the application installs a provider. The instruments, all under the
// "azlease." namespace, with units and low-cardinality attributes:
//
//	azlease.request.duration      histogram, s      each attempt of an operation (azlease.operation, azlease.outcome)
//	azlease.term.starts           counter, {term}   terms begun (azlease.role)
//	azlease.term.ends             counter, {term}   terms ended (azlease.role, azlease.term.end_cause)
//	azlease.renewal.slack         histogram, s      validity left when a renewal's answer arrived: the safety slack
//	azlease.elector.leader        gauge, {leader}   1 while this Elector leads, else 0
//	azlease.failures.consecutive  gauge, {request}  requests failed in a row (an Elector's polls, acquisitions and renewals)
//	azlease.mutex.wait.duration   histogram, s      how long Lock waited (azlease.outcome: acquired, canceled, error)
//	azlease.once.calls            counter, {call}   DoOnce calls by outcome (azlease.once.outcome)
//	azlease.elector.handoffs      counter, {handoff} hand-offs of leadership (azlease.handoff.reason, azlease.handoff.outcome)
//	azlease.elector.priority      gauge, {priority} this Elector's priority
//	azlease.elector.candidates    gauge, {candidate} ready candidates other than itself at its last listing as leader
//
// Every instrument also carries azlease.lock, the lock blob's container/name,
// unless the options say to leave it out (for processes that hold thousands
// of locks).

// Attribute keys.
const (
	attrLock        = attribute.Key("azlease.lock")
	attrOperation   = attribute.Key("azlease.operation")
	attrOutcome     = attribute.Key("azlease.outcome")
	attrRole        = attribute.Key("azlease.role")
	attrEndCause    = attribute.Key("azlease.term.end_cause")
	attrOnceOutcome = attribute.Key("azlease.once.outcome")
	attrReason      = attribute.Key("azlease.handoff.reason")
	attrHandOff     = attribute.Key("azlease.handoff.outcome")
	meterName       = "github.com/azlease/azlease"
)

// durationBuckets suit request and wait durations in seconds (OpenTelemetry's
// HTTP duration boundaries, extended to a minute).
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}

// slackBuckets suit the validity left at a renewal, from a lease of 15 to 60 s.
var slackBuckets = []float64{0, 0.5, 1, 2, 3, 5, 8, 10, 12, 14, 15, 20, 30, 45, 60}

// instruments are the instruments of one MeterProvider.
type instruments struct {
	meter           metric.Meter
	requestDuration metric.Float64Histogram
	termStarts      metric.Int64Counter
	termEnds        metric.Int64Counter
	renewalSlack    metric.Float64Histogram
	leader          metric.Int64ObservableGauge
	failures        metric.Int64ObservableGauge
	mutexWait       metric.Float64Histogram
	onceCalls       metric.Int64Counter
	handoffs        metric.Int64Counter
	priority        metric.Int64ObservableGauge
	candidates      metric.Int64ObservableGauge
}

func newInstruments(mp metric.MeterProvider) *instruments {
	m := mp.Meter(meterName)
	in := &instruments{meter: m}
	// Instrument constructors return a usable no-op instrument along with
	// any error, so errors (a provider's own limits) are only reported.
	var errs []error
	var err error
	in.requestDuration, err = m.Float64Histogram("azlease.request.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of each attempt of a lease or lock-blob operation."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	in.termStarts, err = m.Int64Counter("azlease.term.starts",
		metric.WithUnit("{term}"), metric.WithDescription("Terms begun: leases acquired and held."))
	errs = append(errs, err)
	in.termEnds, err = m.Int64Counter("azlease.term.ends",
		metric.WithUnit("{term}"), metric.WithDescription("Terms ended, by cause."))
	errs = append(errs, err)
	in.renewalSlack, err = m.Float64Histogram("azlease.renewal.slack",
		metric.WithUnit("s"), metric.WithDescription("Validity left on the lease when a renewal's answer arrived."),
		metric.WithExplicitBucketBoundaries(slackBuckets...))
	errs = append(errs, err)
	in.leader, err = m.Int64ObservableGauge("azlease.elector.leader",
		metric.WithUnit("{leader}"), metric.WithDescription("1 while this Elector leads, else 0."))
	errs = append(errs, err)
	in.failures, err = m.Int64ObservableGauge("azlease.failures.consecutive",
		metric.WithUnit("{request}"), metric.WithDescription("Requests to storage that failed in a row."))
	errs = append(errs, err)
	in.mutexWait, err = m.Float64Histogram("azlease.mutex.wait.duration",
		metric.WithUnit("s"), metric.WithDescription("How long Mutex.Lock waited, by outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	in.onceCalls, err = m.Int64Counter("azlease.once.calls",
		metric.WithUnit("{call}"), metric.WithDescription("DoOnce calls, by outcome."))
	errs = append(errs, err)
	in.handoffs, err = m.Int64Counter("azlease.elector.handoffs",
		metric.WithUnit("{handoff}"), metric.WithDescription("Hand-offs of leadership an Elector began, by reason and outcome."))
	errs = append(errs, err)
	in.priority, err = m.Int64ObservableGauge("azlease.elector.priority",
		metric.WithUnit("{priority}"), metric.WithDescription("This Elector's priority (ElectorOptions.Priority)."))
	errs = append(errs, err)
	in.candidates, err = m.Int64ObservableGauge("azlease.elector.candidates",
		metric.WithUnit("{candidate}"), metric.WithDescription("Ready candidates other than itself at this Elector's last listing as leader."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	return in
}

// instrumentCache holds the instruments of each MeterProvider seen, so that
// thousands of locks share one set.
var instrumentCache struct {
	sync.Mutex
	m map[metric.MeterProvider]*instruments
}

func instrumentsFor(mp metric.MeterProvider) *instruments {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if !reflect.TypeOf(mp).Comparable() {
		return newInstruments(mp) // cannot be a map key; rare
	}
	instrumentCache.Lock()
	defer instrumentCache.Unlock()
	if in, ok := instrumentCache.m[mp]; ok {
		return in
	}
	if instrumentCache.m == nil {
		instrumentCache.m = make(map[metric.MeterProvider]*instruments)
	}
	in := newInstruments(mp)
	instrumentCache.m[mp] = in
	return in
}

// telemetry records one lock blob's metrics. While no MeterProvider is
// installed (or a view drops an instrument), each recording asks the
// instrument whether it is enabled and stops there: it builds no attribute
// set and allocates nothing. With a provider, each recording builds its
// attribute set (a few attributes) and hands it over.
type telemetry struct {
	in   *instruments
	lock attribute.KeyValue
	name bool // include azlease.lock
	role string
}

func newTelemetry(mp metric.MeterProvider, container, blob, role string, omitName bool) *telemetry {
	return &telemetry{in: instrumentsFor(mp), lock: attrLock.String(container + "/" + blob), name: !omitName, role: role}
}

func (tm *telemetry) attrs(kvs ...attribute.KeyValue) metric.MeasurementOption {
	if tm.name {
		kvs = append(kvs, tm.lock)
	}
	return metric.WithAttributeSet(attribute.NewSet(kvs...))
}

// request records one attempt of op that took d and ended as err.
func (tm *telemetry) request(ctx context.Context, op string, d time.Duration, err error) {
	if tm == nil {
		return
	}
	rctx := context.WithoutCancel(ctx)
	if !tm.in.requestDuration.Enabled(rctx) {
		return
	}
	tm.in.requestDuration.Record(rctx, d.Seconds(), tm.attrs(attrOperation.String(op), attrOutcome.String(outcomeOf(ctx, err))))
}

func (tm *telemetry) termStarted() {
	if tm == nil {
		return
	}
	if !tm.in.termStarts.Enabled(context.Background()) {
		return
	}
	tm.in.termStarts.Add(context.Background(), 1, tm.attrs(attrRole.String(tm.role)))
}

func (tm *telemetry) termEnded(cause error) {
	if tm == nil {
		return
	}
	if !tm.in.termEnds.Enabled(context.Background()) {
		return
	}
	tm.in.termEnds.Add(context.Background(), 1, tm.attrs(attrRole.String(tm.role), attrEndCause.String(endCause(cause))))
}

func (tm *telemetry) renewed(slack time.Duration) {
	if tm == nil {
		return
	}
	if !tm.in.renewalSlack.Enabled(context.Background()) {
		return
	}
	tm.in.renewalSlack.Record(context.Background(), max(slack, 0).Seconds(), tm.attrs())
}

func (tm *telemetry) waited(d time.Duration, outcome string) {
	if tm == nil {
		return
	}
	if !tm.in.mutexWait.Enabled(context.Background()) {
		return
	}
	tm.in.mutexWait.Record(context.Background(), d.Seconds(), tm.attrs(attrOutcome.String(outcome)))
}

func (tm *telemetry) onceCall(outcome string) {
	if tm == nil {
		return
	}
	if !tm.in.onceCalls.Enabled(context.Background()) {
		return
	}
	tm.in.onceCalls.Add(context.Background(), 1, tm.attrs(attrOnceOutcome.String(outcome)))
}

// handedOver records a hand-off of leadership: why (stop, yield, request,
// priority, never_lead) and how it ended (taken, released, none: nobody
// acknowledged, failed).
func (tm *telemetry) handedOver(reason, outcome string) {
	if tm == nil {
		return
	}
	if !tm.in.handoffs.Enabled(context.Background()) {
		return
	}
	tm.in.handoffs.Add(context.Background(), 1, tm.attrs(attrReason.String(reason), attrHandOff.String(outcome)))
}

// observeSuccession registers a callback reporting an Elector's priority and
// the candidates it last listed; unregister it when the Elector stops.
func (tm *telemetry) observeSuccession(priority int64, candidates func() int64) (unregister func()) {
	if tm == nil {
		return func() {}
	}
	set := tm.attrs()
	return tm.register(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(tm.in.priority, priority, set)
		o.ObserveInt64(tm.in.candidates, candidates(), set)
		return nil
	}, tm.in.priority, tm.in.candidates)
}

// observe registers a callback reporting an Elector's leadership and
// consecutive failures at each collection; unregister it when the Elector
// stops.
func (tm *telemetry) observe(leading func() bool, failures func() int64) (unregister func()) {
	if tm == nil {
		return func() {}
	}
	set := tm.attrs()
	return tm.register(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if leading() {
			v = 1
		}
		o.ObserveInt64(tm.in.leader, v, set)
		o.ObserveInt64(tm.in.failures, failures(), set)
		return nil
	}, tm.in.leader, tm.in.failures)
}

// register registers cb for instruments, and returns what unregisters it;
// a failure goes to OpenTelemetry's error handler, never to the caller.
func (tm *telemetry) register(cb metric.Callback, instruments ...metric.Observable) (unregister func()) {
	reg, err := tm.in.meter.RegisterCallback(cb, instruments...)
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	return func() {
		if err := reg.Unregister(); err != nil {
			otel.Handle(err)
		}
	}
}

// outcomeOf names the outcome of a request for metrics: a small fixed set.
func outcomeOf(ctx context.Context, err error) string {
	if err == nil {
		return "ok"
	}
	// An answer from storage names the outcome even if the caller's context
	// ended meanwhile: a refused renewal ends the term, whose owner cancels
	// the renewals' context before this request is recorded.
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		ctx = context.WithoutCancel(ctx)
	}
	switch classify(ctx, err) {
	case classHeld:
		return "held"
	case classLost, classBroken:
		return "lost"
	case classNotFound:
		return "not_found"
	case classConflict:
		return "conflict"
	case classCanceled:
		return "canceled"
	case classPermanent:
		return "permanent"
	}
	switch {
	case errors.Is(err, ErrLeaseHeld):
		return "held"
	case errors.Is(err, ErrLeaseLost):
		return "lost"
	case errors.Is(err, ErrPermanent):
		return "permanent"
	}
	return "transient"
}

// endCause names why a term ended, for metrics: stopped (by its owner),
// stalled (StepDownOnStall), max_hold (a Mutex's MaxHold), paused (the
// renewer woke after the deadline), deadline (no renewal in time), broken,
// lost (another holder's lease, or the blob gone), canceled (the context the
// term derives from ended: a DoOnce caller's), or other.
func endCause(cause error) string {
	switch {
	case errors.Is(cause, ErrStalled):
		return "stalled"
	case errors.Is(cause, ErrYielded):
		return "yielded"
	case cause == nil, errors.Is(cause, ErrStopped):
		return "stopped"
	case errors.Is(cause, ErrMaxHoldExceeded):
		return "max_hold"
	case errors.Is(cause, ErrPaused):
		return "paused"
	case errors.Is(cause, ErrDeadlinePassed):
		return "deadline"
	case errors.Is(cause, ErrLeaseBroken):
		return "broken"
	case errors.Is(cause, ErrLeaseLost):
		return "lost"
	case errors.Is(cause, context.Canceled), errors.Is(cause, context.DeadlineExceeded):
		return "canceled"
	}
	return "other"
}
