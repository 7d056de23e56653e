package gocronlock

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// dummyClient is a container client that is never called.
func dummyClient(t *testing.T) *container.Client {
	t.Helper()
	cc, err := container.NewClientWithNoCredential("http://127.0.0.1:1/devstoreaccount1/c", nil)
	require.NoError(t, err)
	return cc
}

func mustLocker(t *testing.T, opts *Options) *Locker {
	t.Helper()
	l, err := NewLocker(dummyClient(t), opts)
	require.NoError(t, err)
	return l
}

// TestTick: a run belongs to the tick nearest to when it fires, so replicas
// whose fires for one tick lie within Period/2 of it agree on it; past
// Period/2 they are told the next (or previous) one: the skew a tick told by
// time alone tolerates.
func TestTick(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return tm
	}
	l := mustLocker(t, &Options{Period: 5 * time.Second})
	tick := at("2026-11-21T02:00:05Z")
	for _, skew := range []time.Duration{0, time.Millisecond, 1500 * time.Millisecond, -1500 * time.Millisecond, 2499 * time.Millisecond, -2500 * time.Millisecond} {
		assert.Equal(t, tick, l.Tick(tick.Add(skew)), "a fire %v from the tick", skew)
	}
	assert.Equal(t, tick.Add(5*time.Second), l.Tick(tick.Add(2500*time.Millisecond)), "half a period late: the next tick")
	assert.Equal(t, tick.Add(-5*time.Second), l.Tick(tick.Add(-2501*time.Millisecond)), "more than half a period early: the previous tick")
	assert.Equal(t, "job/20261121T020005Z", Key("job", l.Tick(tick.Add(time.Second))))

	// A daily job at 02:00 UTC with Offset 2h; and with Offset 0, where
	// 02:00 is 2 h from its tick (midnight), far from the midpoint.
	daily := mustLocker(t, &Options{Period: 24 * time.Hour, Offset: 2 * time.Hour})
	assert.Equal(t, at("2026-11-21T02:00:00Z"), daily.Tick(at("2026-11-21T02:00:01.5Z")))
	assert.Equal(t, at("2026-11-21T02:00:00Z"), daily.Tick(at("2026-11-21T01:59:58.5Z")))
	midnight := mustLocker(t, &Options{Period: 24 * time.Hour})
	assert.Equal(t, at("2026-11-21T00:00:00Z"), midnight.Tick(at("2026-11-21T02:00:01Z")))
	assert.Equal(t, at("2026-11-22T00:00:00Z"), midnight.Tick(at("2026-11-21T22:00:00Z")))

	assert.Equal(t, at("1969-12-31T23:59:55Z"), l.Tick(at("1969-12-31T23:59:53Z")), "before 1970 too")
	assert.Equal(t, at("1969-12-31T23:59:50Z"), l.Tick(at("1969-12-31T23:59:52.4Z")))

	// StartAt: the latest tick at or before now.
	l.now = func() time.Time { return at("2026-11-21T02:00:08Z") }
	assert.NotNil(t, l.StartAt())
	var nilLocker *Locker
	assert.True(t, nilLocker.Tick(tick).IsZero())
	assert.NotNil(t, nilLocker.StartAt(), "a nil Locker does not panic")
	var zero Locker
	assert.True(t, zero.Tick(tick).IsZero())
	assert.NotNil(t, zero.StartAt(), "nor does the zero Locker")
}

// TestOptions: every field's bounds, named in the error.
func TestOptions(t *testing.T) {
	cc := dummyClient(t)
	for _, tc := range []struct {
		opts  *Options
		field string
	}{
		{nil, "Options"},
		{&Options{}, "Options.Period"},
		{&Options{Period: 1500 * time.Millisecond}, "Options.Period"},
		{&Options{Period: MaxPeriod + time.Second}, "Options.Period"},
		{&Options{Period: time.Minute, Offset: time.Minute}, "Options.Offset"},
		{&Options{Period: time.Minute, Offset: -time.Second}, "Options.Offset"},
		{&Options{Period: time.Minute, Offset: 500 * time.Millisecond}, "Options.Offset"},
		{&Options{Period: time.Minute, Retention: 4 * time.Minute}, "Options.Retention"},
		{&Options{Period: time.Hour, Retention: 3 * time.Hour}, "Options.Retention"},
		{&Options{Period: time.Hour, Retention: MaxRetention + time.Hour}, "Options.Retention"},
		{&Options{Period: time.Hour, Once: &azlease.DoOnceOptions{Retention: time.Hour}}, "Options.Once.Retention"},
	} {
		_, err := NewLocker(cc, tc.opts)
		require.ErrorIs(t, err, azlease.ErrInvalidOptions, "%+v", tc.opts)
		var oe *OptionError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, tc.field, oe.Field)
		assert.Contains(t, err.Error(), tc.field)
	}
	_, err := NewLocker(nil, &Options{Period: time.Minute})
	require.ErrorIs(t, err, azlease.ErrInvalidOptions)

	for _, tc := range []struct {
		opts Options
		want time.Duration // the DoOnce Retention
	}{
		{Options{Period: 5 * time.Second}, time.Hour},
		{Options{Period: 24 * time.Hour}, 240 * time.Hour},
		{Options{Period: 5 * time.Second, Retention: 5 * time.Minute}, 5 * time.Minute},
		{Options{Period: time.Hour, Retention: 4 * time.Hour}, 4 * time.Hour},
		{Options{Period: time.Hour, Retention: -1}, 0},
	} {
		l, err := NewLocker(cc, &tc.opts)
		require.NoError(t, err)
		assert.Equal(t, tc.want, l.cfg.once.Retention, "%+v", tc.opts)
	}
	for period, poll := range map[time.Duration]time.Duration{time.Second: 100 * time.Millisecond, 5 * time.Second: 500 * time.Millisecond, time.Hour: 2 * time.Second} {
		assert.Equal(t, poll, mustLocker(t, &Options{Period: period}).cfg.once.PollInterval, "the default poll for %v", period)
	}
	assert.Equal(t, time.Second, mustLocker(t, &Options{Period: time.Hour, Once: &azlease.DoOnceOptions{PollInterval: time.Second}}).cfg.once.PollInterval)
	var oe *OptionError
	assert.Equal(t, "<nil>", oe.Error())
	var zero Locker
	_, err = zero.Lock(t.Context(), "job")
	require.Error(t, err, "the zero Locker refuses")
	var nl *Locker
	_, err = nl.Lock(t.Context(), "job")
	require.Error(t, err)
	var ze Elector
	require.ErrorIs(t, ze.IsLeader(t.Context()), ErrNotLeader)
	require.ErrorIs(t, NewElector(nil).IsLeader(t.Context()), ErrNotLeader)
}
