package shards_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// TestGroupMetrics: the owned and misplaced gauges, acquisitions, moves
// and the time to balance, read back through the OpenTelemetry SDK.
func TestGroupMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(8)
		o := newOwners()
		readers := map[string]*sdkmetric.ManualReader{}
		var groups []*shards.Group
		start := func(id string) {
			r := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			readers[id] = r
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, MeterProvider: mp})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), o.work(id)))
			groups = append(groups, g)
		}
		start("a")
		time.Sleep(10 * time.Second)
		start("b")
		time.Sleep(10 * time.Second)

		collect := func(id string) map[string]metricdata.Metrics {
			var rm metricdata.ResourceMetrics
			require.NoError(t, readers[id].Collect(context.Background(), &rm))
			out := map[string]metricdata.Metrics{}
			for _, sm := range rm.ScopeMetrics {
				if sm.Scope.Name != "github.com/azlease/azlease/shards" {
					continue // the library's own, from the group's leases
				}
				for _, m := range sm.Metrics {
					out[m.Name] = m
				}
			}
			return out
		}
		gauge := func(m metricdata.Metrics) int64 {
			return m.Data.(metricdata.Gauge[int64]).DataPoints[0].Value
		}
		sum := func(m metricdata.Metrics, attr, value string) (n int64) {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, ok := dp.Attributes.Value(attributeKey(attr)); attr == "" || (ok && v.AsString() == value) {
					n += dp.Value
				}
			}
			return n
		}
		a, b := collect("a"), collect("b")
		assert.Equal(t, int64(4), gauge(a["azlease.shards.owned"]))
		assert.Equal(t, int64(4), gauge(b["azlease.shards.owned"]))
		assert.Zero(t, gauge(a["azlease.shards.misplaced"]))
		assert.Equal(t, int64(8), sum(a["azlease.shards.acquisitions"], "azlease.shards.how", "free"))
		assert.Equal(t, int64(4), sum(a["azlease.shards.moves"], "azlease.outcome", "handed_off"))
		assert.Equal(t, int64(4), sum(b["azlease.shards.acquisitions"], "azlease.shards.how", "handed over"))
		bal := a["azlease.shards.balance.duration"].Data.(metricdata.Histogram[float64]).DataPoints
		require.NotEmpty(t, bal)
		assert.Positive(t, bal[0].Count, "a saw the group unbalanced when b joined, then balanced")

		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", names)
	})
}

func attributeKey(k string) attribute.Key { return attribute.Key(k) }

// shardMetrics collects r's instruments of package shards, by name.
func shardMetrics(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == "github.com/azlease/azlease/shards" {
			for _, m := range sm.Metrics {
				out[m.Name] = m
			}
		}
	}
	return out
}
