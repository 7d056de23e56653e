package shards_test

// Balancing by load on the public API, in fake time on the emulator:
// replicas whose work reports Zipf loads converge within the band; a
// shard's load goes with it when it moves; shards that never report count
// as the mean (count balancing); a shard heavier than a replica's share is
// alone on its replica and said so; loads fit a membership at MaxShards
// with the longest names.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// loads is each shard's load, as the tests' work reports it every second.
type loads struct {
	mu sync.Mutex
	v  map[string]float64
}

func (l *loads) get(s string) (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.v[s]
	return v, ok
}

// zipfLoads is 1/(i+1)^s for shard i: the heaviest have neighbouring
// names, so the count plan gives them to the same replica.
func zipfLoads(names []string, s float64) *loads {
	l := &loads{v: map[string]float64{}}
	for i, n := range names {
		l.v[n] = 1 / math.Pow(float64(i+1), s)
	}
	return l
}

// reporting wraps an owners' work: it reports the shard's load every
// second while it runs, and records its load when it starts.
func reporting(o *owners, replica string, l *loads, started func(shard string, load float64, ok bool)) shards.Work {
	inner := o.work(replica)
	return func(ctx context.Context, s *shards.Shard) error {
		if started != nil {
			v, ok := s.Load()
			started(s.Name, v, ok)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if v, ok := l.get(s.Name); ok {
					s.SetLoad(v)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}()
		err := inner(ctx, s)
		<-done
		return err
	}
}

// imbalance is what Inspect says: the largest load per capacity over the
// level among the members that host no hot shard.
func imbalance(a shards.Assignment) float64 {
	hosts := map[string]bool{}
	for _, h := range a.Hot {
		for _, s := range a.Shards {
			if s.Name == h {
				hosts[s.Owner] = true
			}
		}
	}
	worst := 0.0
	for _, m := range a.Members {
		if !hosts[m.Name] && a.Level > 0 {
			worst = max(worst, m.Load/float64(m.Weight)/a.Level)
		}
	}
	return worst
}

// TestGroupBalancesByLoad: four replicas on 32 shards whose loads follow
// Zipf(0.8), the heaviest with neighbouring names (the count plan puts
// them together: 2.1 × the mean), converge within the band (1.10) and
// stay there, never owning a shard twice.
func TestGroupBalancesByLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(32)
		l := zipfLoads(names, 0.8)
		o := newOwners()
		var groups []*shards.Group
		for i := range 4 {
			id := fmt.Sprintf("r%d", i)
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, Logger: testLogger(id)})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), reporting(o, id, l, nil)))
			groups = append(groups, g)
		}
		obs := srv.Client("observer")
		var a shards.Assignment
		start := time.Now()
		for time.Since(start) < 3*time.Minute {
			time.Sleep(time.Second)
			var err error
			a, err = shards.Inspect(context.Background(), obs, "g", nil)
			require.NoError(t, err)
			if a.ByLoad && a.Misplaced == 0 && imbalance(a) <= 1.10 {
				break
			}
		}
		took := time.Since(start)
		require.True(t, a.ByLoad, "balanced by load")
		require.LessOrEqual(t, imbalance(a), 1.10, "within the band after %v: %+v", took, a.Members)
		t.Logf("within the band after %v, max/mean %.3f", took, imbalance(a))
		// It stays there.
		for range 60 {
			time.Sleep(time.Second)
			a, err := shards.Inspect(context.Background(), obs, "g", nil)
			require.NoError(t, err)
			assert.LessOrEqual(t, imbalance(a), 1.10)
		}
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", names)
	})
}

// startedLoads records, for each shard a replica's work started, the load
// Shard.Load gave it then (-1: none).
type startedLoads struct {
	mu   sync.Mutex
	seen map[string]float64
}

func (sl *startedLoads) record(s string, v float64, ok bool) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.seen == nil {
		sl.seen = map[string]float64{}
	}
	sl.seen[s] = -1
	if ok {
		sl.seen[s] = v
	}
}

func (sl *startedLoads) get() map[string]float64 {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return maps.Clone(sl.seen)
}

// startOne starts replica id of group "g" over names with work.
func startOne(t *testing.T, srv *azleasetest.Server, id string, names []string, work shards.Work) *shards.Group {
	t.Helper()
	g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id})
	require.NoError(t, err)
	require.NoError(t, g.Start(context.Background(), work))
	return g
}

// TestLoadGoesWithTheShard: a shard handed on carries its smoothed load:
// the receiver's work finds it in Shard.Load before reporting anything,
// and Inspect shows it while the receiver has not published it yet.
func TestLoadGoesWithTheShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(2)
		l := &loads{v: map[string]float64{"0": 100, "1": 100}}
		o := newOwners()
		a := startOne(t, srv, "a", names, reporting(o, "a", l, nil))
		time.Sleep(30 * time.Second)
		require.Equal(t, map[string]int{"a": 2}, o.counts())

		// b reports nothing: what it knows of the load came with the shard.
		var started startedLoads
		b := startOne(t, srv, "b", names, reporting(o, "b", &loads{v: map[string]float64{}}, started.record))
		time.Sleep(30 * time.Second)
		require.Equal(t, map[string]int{"a": 1, "b": 1}, o.counts())
		seen := started.get()
		require.Len(t, seen, 1)
		for _, v := range seen {
			assert.InEpsilon(t, 100, v, 0.01, "the receiver starts from the load carried")
		}
		got, err := shards.Inspect(context.Background(), srv.Client("observer"), "g", nil)
		require.NoError(t, err)
		for _, s := range got.Shards {
			assert.True(t, s.LoadReported, "%+v", s)
			assert.InEpsilon(t, 100, s.Load, 0.01, "%+v", s)
			if s.Owner == "b" {
				assert.Equal(t, "join", s.Moved, "why it moved: b held nothing")
			}
		}
		require.NoError(t, b.Stop(context.Background()))
		require.NoError(t, a.Stop(context.Background()))
		o.check(t, srv, "g", names)
	})
}

// TestLoadStaysWithALeaversShards: a replica that stops cleanly leaves its
// shards' loads on its membership: the replica that takes them starts its
// work from them (Shard.Load), and the group counts them at their loads
// rather than at the mean, while free and once taken, before the taker
// publishes anything of its own (they counted at the mean, and the taker
// started from nothing, when a leave withdrew them).
func TestLoadStaysWithALeaversShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(2)
		l := &loads{v: map[string]float64{"0": 100, "1": 1}}
		o := newOwners()
		a := startOne(t, srv, "a", names, reporting(o, "a", l, nil))
		time.Sleep(30 * time.Second)
		require.Equal(t, map[string]int{"a": 2}, o.counts())
		require.NoError(t, a.Stop(context.Background()))

		got, err := shards.Inspect(context.Background(), srv.Client("observer"), "g", nil)
		require.NoError(t, err)
		want := map[string]float64{"0": 100, "1": 1}
		for _, s := range got.Shards {
			assert.True(t, s.LoadReported, "free, its leaver's load: %+v", s)
			assert.InEpsilon(t, want[s.Name], s.Load, 0.01, "%+v", s)
		}

		// b reports nothing: what it knows of the loads came from a.
		var started startedLoads
		b := startOne(t, srv, "b", names, reporting(o, "b", &loads{v: map[string]float64{}}, started.record))
		for range 30 {
			time.Sleep(time.Second)
			got, err := shards.Inspect(context.Background(), srv.Client("observer"), "g", nil)
			require.NoError(t, err)
			for _, s := range got.Shards {
				assert.True(t, s.LoadReported, "%+v", s)
				assert.InEpsilon(t, want[s.Name], s.Load, 0.05, "%+v", s)
			}
		}
		require.Equal(t, map[string]int{"b": 2}, o.counts())
		seen := started.get()
		assert.Len(t, seen, 2)
		for s, v := range seen {
			assert.InEpsilon(t, want[s], v, 0.01, "the taker starts from the leaver's load of %s", s)
		}
		require.NoError(t, b.Stop(context.Background()))
		o.check(t, srv, "g", names)
	})
}

// TestUnreportedShardsCountAsTheMean: when half the shards report a load
// of 1 and the rest nothing, the rest count as 1: the group balances by
// count, 8 and 8.
func TestUnreportedShardsCountAsTheMean(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(16)
		l := &loads{v: map[string]float64{}}
		for _, s := range names[:8] {
			l.v[s] = 1
		}
		o := newOwners()
		var groups []*shards.Group
		for _, id := range []string{"a", "b"} {
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), reporting(o, id, l, nil)))
			groups = append(groups, g)
			time.Sleep(20 * time.Second)
		}
		time.Sleep(time.Minute)
		assert.Equal(t, map[string]int{"a": 8, "b": 8}, o.counts())
		got, err := shards.Inspect(context.Background(), srv.Client("observer"), "g", nil)
		require.NoError(t, err)
		assert.True(t, got.ByLoad)
		reported := 0
		for _, s := range got.Shards {
			if s.LoadReported {
				reported++
			}
			assert.InEpsilon(t, 1, s.Load, 0.01, "%+v", s)
		}
		assert.Equal(t, 8, reported)
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", names)
	})
}

// TestHotShardIsAlone: a shard whose load alone exceeds a replica's share
// ends alone on its replica; Inspect names it, its owner says so once at
// Info, and the others share the rest within the band. The metrics say the
// same: every replica counts one hot shard and the imbalance within the
// band, the loads add up to the group's, and the hand-ons that made room
// are counted with the reason "hot".
func TestHotShardIsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(12)
		l := &loads{v: map[string]float64{}}
		for _, s := range names {
			l.v[s] = 1
		}
		l.v["5"] = 20 // the rest is 11: each of three replicas' share would be 31/3
		o := newOwners()
		var logs syncBuffer
		var groups []*shards.Group
		readers := map[string]*sdkmetric.ManualReader{}
		for _, id := range []string{"a", "b", "c"} {
			readers[id] = sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(readers[id]))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, MeterProvider: mp,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), reporting(o, id, l, nil)))
			groups = append(groups, g)
		}
		time.Sleep(3 * time.Minute)
		got, err := shards.Inspect(context.Background(), srv.Client("observer"), "g", nil)
		require.NoError(t, err)
		require.Equal(t, []string{"5"}, got.Hot)
		host := ""
		owns := map[string]int{}
		for _, s := range got.Shards {
			owns[s.Owner]++
			if s.Name == "5" {
				host = s.Owner
			}
		}
		assert.Equal(t, 1, owns[host], "alone on its replica: %v", owns)
		assert.InDelta(t, 5.5, got.Level, 0.2, "the others' level: 11 over 2")
		assert.LessOrEqual(t, imbalance(got), 1.10)
		assert.Equal(t, 1, strings.Count(logs.String(), "shard 5 alone exceeds a replica's share: split it"), logs.String())

		var total float64
		var hotHandOns int64
		for id, r := range readers {
			m := shardMetrics(t, r)
			assert.Equal(t, int64(1), m["azlease.shards.hot"].Data.(metricdata.Gauge[int64]).DataPoints[0].Value, "%s: hot shards", id)
			assert.Equal(t, int64(1), m["azlease.shards.capacity"].Data.(metricdata.Gauge[int64]).DataPoints[0].Value, "%s: capacity", id)
			imb := m["azlease.shards.imbalance"].Data.(metricdata.Gauge[float64]).DataPoints[0].Value
			assert.True(t, imb > 0 && imb <= 1.10, "%s: imbalance %v, within the band", id, imb)
			total += m["azlease.shards.load"].Data.(metricdata.Gauge[float64]).DataPoints[0].Value
			if h, ok := m["azlease.shards.handons"]; ok {
				for _, dp := range h.Data.(metricdata.Sum[int64]).DataPoints {
					if v, ok := dp.Attributes.Value("azlease.shards.reason"); ok && v.AsString() == "hot" {
						hotHandOns += dp.Value
					}
				}
			}
		}
		assert.InDelta(t, 31, total, 1, "the replicas' loads add up to the group's")
		assert.Positive(t, hotHandOns, "hand-ons to make room for the hot shard, by reason")
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", names)
	})
}

// listings signals each List Blobs of one replica, with the time since its
// previous one.
type listings struct {
	mu   sync.Mutex
	last time.Time
	c    chan time.Duration
}

func (l *listings) fault(id string) azleasetest.FaultFunc {
	return func(r azleasetest.Request) azleasetest.Fault {
		if r.Client == id && r.Op == azleasetest.OpListBlobs {
			l.mu.Lock()
			gap := time.Duration(0)
			if !l.last.IsZero() {
				gap = time.Since(l.last)
			}
			l.last = time.Now()
			l.mu.Unlock()
			select {
			case l.c <- gap:
			default:
			}
		}
		return azleasetest.Fault{}
	}
}

// settledListing waits for a listing of the watched replica that came a
// listing interval after the one before: it lists only every
// ListInterval, as a replica of a settled group does.
func (l *listings) settledListing() {
	for gap := range l.c {
		if gap >= shards.DefaultListInterval-shards.DefaultPollInterval {
			return
		}
	}
}

// drain forgets the listings seen so far.
func (l *listings) drain() {
	for len(l.c) > 0 {
		<-l.c
	}
}

// watchedGroup starts n replicas r0, r1, … of group "g" over k shards, each
// reporting a load of 1 until l changes it, with r0's listings watched
// (lst).
func watchedGroup(t *testing.T, k, n int) (srv *azleasetest.Server, names []string, l *loads, o *owners, lst *listings, groups []*shards.Group) {
	t.Helper()
	srv = azleasetest.NewServer(t, nil)
	names = shards.Numbered(k)
	l = &loads{v: map[string]float64{}}
	for _, s := range names {
		l.v[s] = 1
	}
	o = newOwners()
	lst = &listings{c: make(chan time.Duration, 1)}
	srv.SetFaults(lst.fault("r0"))
	return srv, names, l, o, lst, startReporting(t, srv, names, n, o, l)
}

// TestLoadRiseIsPublishedAtOnce: in a settled group (each replica lists
// only every ListInterval), a shard whose load triples just after its
// owner listed is published within a couple of polls, not at the owner's
// next listing (a ListInterval later), as the rise of a ×10 jump was.
func TestLoadRiseIsPublishedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, names, l, o, lst, groups := watchedGroup(t, 4, 2)
		// Settled: r0 lists only every ListInterval.
		time.Sleep(90 * time.Second)
		lst.settledListing()
		time.Sleep(100 * time.Millisecond)
		mine := groups[0].Owned()
		require.NotEmpty(t, mine)
		s := mine[0]
		l.mu.Lock()
		l.v[s] = 3
		l.mu.Unlock()
		rose := time.Now()
		obs := srv.Client("observer")
		for {
			a, err := shards.Inspect(context.Background(), obs, "g", nil)
			require.NoError(t, err)
			if st := a.Shards[slices.IndexFunc(a.Shards, func(x shards.ShardStatus) bool { return x.Name == s })]; st.Load >= 2 {
				break
			}
			require.Less(t, time.Since(rose), time.Minute, "never published")
			time.Sleep(250 * time.Millisecond)
		}
		took := time.Since(rose)
		t.Logf("published after %v", took)
		assert.LessOrEqual(t, took, 2*shards.DefaultPollInterval+2*time.Second, "the rise waits for the owner's next listing")
		stopAll(t, srv, groups, o, names)
	})
}

// TestBandCrossingIsActedOnAtOnce: in a settled group (each replica lists
// only every ListInterval), a replica whose load creeps over the band by
// changes too small to be written at once (each under loadTotalStep) hands
// a shard on within a few polls of publishing the crossing, rather than
// at the next listings (its own decision was made on its loads before
// it, and the receiver's announcement waited for its listing too).
func TestBandCrossingIsActedOnAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(24)
		l := &loads{v: map[string]float64{}}
		for _, n := range names {
			l.v[n] = 1
		}
		o := newOwners()
		groups := startReporting(t, srv, names, 3, o, l)
		time.Sleep(90 * time.Second)
		mine := groups[0].Owned()
		require.Len(t, mine, 8, "count-balanced, which is balanced by load")
		obs := srv.Client("observer")
		// r0's shards rise by 1.5 % of its load every 20 s, one at a time,
		// until the plan moves one.
		var planned time.Time
		step, next := 0, time.Now()
		for start := time.Now(); ; {
			require.Less(t, time.Since(start), 10*time.Minute, "never crossed the band")
			if planned.IsZero() && !time.Now().Before(next) {
				l.mu.Lock()
				l.v[mine[step%len(mine)]] += 0.12
				l.mu.Unlock()
				step++
				next = next.Add(20 * time.Second)
			}
			a, err := shards.Inspect(context.Background(), obs, "g", nil)
			require.NoError(t, err)
			if planned.IsZero() && a.Misplaced > 0 {
				planned = time.Now()
				t.Logf("planned after %d steps: %+v", step, a.Members)
			}
			if !planned.IsZero() && !slices.Equal(groups[0].Owned(), mine) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		took := time.Since(planned)
		t.Logf("handed on %v after the plan showed the move", took)
		assert.LessOrEqual(t, took, 3*shards.DefaultPollInterval+2*time.Second, "the crossing waits for the listings")
		stopAll(t, srv, groups, o, names)
	})
}

// TestOwnCrossingIsSeenAtAPoll: in a settled group (each replica lists
// only every ListInterval), a replica whose own load rises by a step too
// small to be written at once (under loadTotalStep) but that takes it just
// over the band's edge, right after it listed, publishes it and has the
// group plan the move within a couple of polls of the crossing, rather
// than at its next listing (ListInterval later) and the loads' republish
// pace: it sees the crossing on its last listing, with no request.
func TestOwnCrossingIsSeenAtAPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, names, l, o, lst, groups := watchedGroup(t, 24, 3)
		time.Sleep(90 * time.Second)
		mine := groups[0].Owned()
		require.Len(t, mine, 8, "count-balanced, which is balanced by load")
		// r0 at 1.09 × the level (the others at 8 each: level (16+T)/3,
		// T = 9.131): seven shards at 1.2616, one at 0.3. A rise of that
		// one to 0.55 (2.7 % of r0's load, under loadTotalStep; of the
		// shard's own, over LoadRiseStep, so that the smoothed value
		// follows within seconds) takes r0 to 1.109 × the level.
		l.mu.Lock()
		for _, s := range mine[1:] {
			l.v[s] = 1.2616
		}
		l.v[mine[0]] = 0.3
		l.mu.Unlock()
		time.Sleep(2 * time.Minute)
		obs := srv.Client("observer")
		a, err := shards.Inspect(context.Background(), obs, "g", nil)
		require.NoError(t, err)
		require.Zero(t, a.Misplaced, "within the band before the step: %+v", a.Members)
		require.True(t, slices.Equal(groups[0].Owned(), mine), "r0 keeps its shards below the edge")
		// Right after one of r0's listings.
		lst.drain()
		lst.settledListing()
		time.Sleep(100 * time.Millisecond)
		l.mu.Lock()
		l.v[mine[0]] = 0.55
		l.mu.Unlock()
		rose := time.Now()
		for {
			a, err := shards.Inspect(context.Background(), obs, "g", nil)
			require.NoError(t, err)
			if a.Misplaced > 0 {
				break
			}
			require.Less(t, time.Since(rose), 2*time.Minute, "never published the crossing")
			time.Sleep(250 * time.Millisecond)
		}
		planned := time.Since(rose)
		for slices.Equal(groups[0].Owned(), mine) {
			require.Less(t, time.Since(rose), 2*time.Minute, "never handed a shard on")
			time.Sleep(250 * time.Millisecond)
		}
		t.Logf("the crossing published and planned after %v, a shard handed on after %v", planned, time.Since(rose))
		// The smoothed load crosses within about 4 s (the fast average
		// passes 1.3 × the smoothed value 2.6 s after the rise); then r0's
		// next poll lists and writes.
		assert.LessOrEqual(t, planned, 4*time.Second+2*shards.DefaultPollInterval+time.Second,
			"the crossing waits for r0's next listing")
		stopAll(t, srv, groups, o, names)
	})
}

// startReporting starts n replicas r0, r1, … of group "g" over names, each
// reporting the loads l sets.
func startReporting(t *testing.T, srv *azleasetest.Server, names []string, n int, o *owners, l *loads) []*shards.Group {
	t.Helper()
	var groups []*shards.Group
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, Logger: testLogger(id)})
		require.NoError(t, err)
		require.NoError(t, g.Start(context.Background(), reporting(o, id, l, nil)))
		groups = append(groups, g)
	}
	return groups
}

// stopAll stops groups and checks that no shard was owned twice.
func stopAll(t *testing.T, srv *azleasetest.Server, groups []*shards.Group, o *owners, names []string) {
	t.Helper()
	for _, g := range groups {
		require.NoError(t, g.Stop(context.Background()))
	}
	o.check(t, srv, "g", names)
}
