package shards

// The group's OpenTelemetry metrics, through the metric API only (as the
// library's own): shards owned, misplaced (how far from balanced this
// replica sees the group), acquisitions, moves and losses, and how long
// the group took to balance after it last became unbalanced.
//
//	azlease.shards.owned             gauge      {shard}  shards this replica owns
//	azlease.shards.misplaced         gauge      {shard}  shards not where the plan puts them, at the last poll
//	azlease.shards.acquisitions      counter    {shard}  shards taken: azlease.shards.how (free, handed over), azlease.shards.reason (below)
//	azlease.shards.moves             counter    {shard}  hand-offs started: azlease.outcome (handed_off, failed, no_receiver)
//	azlease.shards.handons           counter    {shard}  shards handed on: azlease.shards.reason (join, load, hot, zone, list)
//	azlease.shards.losses            counter    {shard}  shards whose lease was lost
//	azlease.shards.releases          counter    {shard}  shards released: azlease.shards.reason (stop: the replica left; removed; list: no live replica's list has it)
//	azlease.shards.balance.duration  histogram  s        from a poll that saw the group unbalanced to the first that saw it balanced
//	azlease.shards.list.failures     counter    {request} listings that failed
//	azlease.shards.load              gauge      1        this replica's load (its shards' smoothed loads, in the work's unit), at the last poll
//	azlease.shards.capacity          gauge      1        this replica's capacity (Options.Weight)
//	azlease.shards.imbalance         gauge      1        the group's largest load per capacity over its level, at the last poll
//	azlease.shards.hot               gauge      {shard}  shards whose load alone exceeds a replica's share, at the last poll
//
// Each carries azlease.shards.group, the group's name. An acquisition's
// azlease.shards.reason is the hand-on's (join, load, hot, zone, list) for
// a shard handed over, and for one taken free: new (its first owner),
// added (again, after a removal), stop (its owner released it), expired
// (its owner's lease expired: a crash, pause or partition), broken, ended
// (not recorded how). Together with the hand-ons' reasons and the
// releases', every change of owner is counted by why.

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/azlease/azlease/shards"

type telemetry struct {
	group        attribute.KeyValue
	acquisitions metric.Int64Counter
	moves        metric.Int64Counter
	handOns      metric.Int64Counter
	losses       metric.Int64Counter
	releases     metric.Int64Counter
	listFailures metric.Int64Counter
	balance      metric.Float64Histogram
	reg          metric.Registration

	mu         sync.Mutex
	misplaced  int64
	unbalanced time.Time // when a poll first saw the group unbalanced; zero while balanced
	load       float64   // this replica's load at the last poll
	imbalance  float64   // the group's max over level at the last poll
	hot        int64
	capacity   int64
}

func newTelemetry(mp metric.MeterProvider, group string, owned func() int64) *telemetry {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(meterName)
	t := &telemetry{group: attribute.String("azlease.shards.group", group)}
	// Constructors return usable no-op instruments along with any error.
	t.acquisitions, _ = m.Int64Counter("azlease.shards.acquisitions", metric.WithUnit("{shard}"), metric.WithDescription("Shards taken by this replica."))
	t.moves, _ = m.Int64Counter("azlease.shards.moves", metric.WithUnit("{shard}"), metric.WithDescription("Hand-offs of shards to other replicas."))
	t.handOns, _ = m.Int64Counter("azlease.shards.handons", metric.WithUnit("{shard}"), metric.WithDescription("Shards handed on to other replicas, by reason."))
	t.losses, _ = m.Int64Counter("azlease.shards.losses", metric.WithUnit("{shard}"), metric.WithDescription("Shards whose lease this replica lost."))
	t.releases, _ = m.Int64Counter("azlease.shards.releases", metric.WithUnit("{shard}"), metric.WithDescription("Shards released as this replica left."))
	t.listFailures, _ = m.Int64Counter("azlease.shards.list.failures", metric.WithUnit("{request}"), metric.WithDescription("Listings of the group that failed."))
	t.balance, _ = m.Float64Histogram("azlease.shards.balance.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a poll that saw the group unbalanced to the first that saw it balanced."),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 20, 30, 60, 120, 300, 600))
	ownedG, _ := m.Int64ObservableGauge("azlease.shards.owned", metric.WithUnit("{shard}"), metric.WithDescription("Shards this replica owns."))
	misG, _ := m.Int64ObservableGauge("azlease.shards.misplaced", metric.WithUnit("{shard}"), metric.WithDescription("Shards not where the plan puts them, at the last poll."))
	loadG, _ := m.Float64ObservableGauge("azlease.shards.load", metric.WithUnit("1"), metric.WithDescription("This replica's load: its shards' smoothed loads, in the work's unit."))
	capG, _ := m.Int64ObservableGauge("azlease.shards.capacity", metric.WithUnit("1"), metric.WithDescription("This replica's capacity (Options.Weight)."))
	imbG, _ := m.Float64ObservableGauge("azlease.shards.imbalance", metric.WithUnit("1"), metric.WithDescription("The group's largest load per capacity over its level, at the last poll."))
	hotG, _ := m.Int64ObservableGauge("azlease.shards.hot", metric.WithUnit("{shard}"), metric.WithDescription("Shards whose load alone exceeds a replica's share, at the last poll."))
	t.reg, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(ownedG, owned(), metric.WithAttributes(t.group))
		t.mu.Lock()
		mis, load, imb, hot, capacity := t.misplaced, t.load, t.imbalance, t.hot, t.capacity
		t.mu.Unlock()
		o.ObserveInt64(misG, mis, metric.WithAttributes(t.group))
		o.ObserveFloat64(loadG, load, metric.WithAttributes(t.group))
		o.ObserveInt64(capG, capacity, metric.WithAttributes(t.group))
		o.ObserveFloat64(imbG, imb, metric.WithAttributes(t.group))
		o.ObserveInt64(hotG, hot, metric.WithAttributes(t.group))
		return nil
	}, ownedG, misG, loadG, capG, imbG, hotG)
	return t
}

func (t *telemetry) close() {
	if t.reg != nil {
		_ = t.reg.Unregister()
	}
}

func (t *telemetry) add(c metric.Int64Counter, attrs ...attribute.KeyValue) {
	if c.Enabled(context.Background()) {
		c.Add(context.Background(), 1, metric.WithAttributes(append(attrs, t.group)...))
	}
}

func (t *telemetry) acquired(how, why string) {
	t.add(t.acquisitions, attribute.String("azlease.shards.how", how), attribute.String("azlease.shards.reason", why))
}
func (t *telemetry) moved(outcome string) {
	t.add(t.moves, attribute.String("azlease.outcome", outcome))
}

// movedFor counts a hand-on made, by its reason.
func (t *telemetry) movedFor(reason string) {
	t.add(t.handOns, attribute.String("azlease.shards.reason", reason))
}
func (t *telemetry) lost() { t.add(t.losses) }
func (t *telemetry) released(why string) {
	t.add(t.releases, attribute.String("azlease.shards.reason", why))
}
func (t *telemetry) failure() { t.add(t.listFailures) }

// observe records what a poll saw: how many shards are misplaced, this
// replica's load and capacity, the group's imbalance and hot shards.
func (t *telemetry) observe(misplaced int, load float64, capacity int, imbalance float64, hot int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.misplaced = int64(misplaced)
	t.load, t.capacity, t.imbalance, t.hot = load, int64(capacity), imbalance, int64(hot)
	switch {
	case misplaced > 0 && t.unbalanced.IsZero():
		t.unbalanced = time.Now()
	case misplaced == 0 && !t.unbalanced.IsZero():
		if t.balance.Enabled(context.Background()) {
			t.balance.Record(context.Background(), time.Since(t.unbalanced).Seconds(), metric.WithAttributes(t.group))
		}
		t.unbalanced = time.Time{}
	}
}
