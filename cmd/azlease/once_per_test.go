package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeriodKey: --per keys a run by the start of the period its start falls
// in, periods being multiples of --per since the Unix epoch, in UTC, the
// keys sorting oldest first.
func TestPeriodKey(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return tm
	}
	day := 24 * time.Hour
	for _, tc := range []struct {
		per  time.Duration
		now  string
		want string
	}{
		{day, "2026-11-21T00:00:00Z", "r/20261121T000000Z"},
		{day, "2026-11-21T02:00:03.5Z", "r/20261121T000000Z"},
		{day, "2026-11-21T23:59:59.999Z", "r/20261121T000000Z"},
		{day, "2026-11-22T00:00:00Z", "r/20261122T000000Z"},
		{day, "2026-11-21T01:30:00+02:00", "r/20261120T000000Z"}, // 23:30 UTC the day before
		{time.Hour, "2026-11-21T02:59:59Z", "r/20261121T020000Z"},
		{5 * time.Minute, "2026-11-21T02:07:00Z", "r/20261121T020500Z"},
		{7 * time.Second, "1970-01-01T00:00:13Z", "r/19700101T000007Z"},
		{7 * time.Second, "1969-12-31T23:59:59Z", "r/19691231T235953Z"}, // floor before 1970 too
	} {
		assert.Equal(t, tc.want, periodKey("r", tc.per, at(tc.now)), "%v at %s", tc.per, tc.now)
	}
	a := periodKey("r", time.Second, at("2026-01-02T03:04:05Z"))
	b := periodKey("r", time.Second, at("2026-11-02T03:04:05Z"))
	assert.Less(t, a, b, "keys sort oldest first")
}

// TestPerFlags: --per and --keep's bounds, and --keep's default.
func TestPerFlags(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		per, keep, want time.Duration
		err             string
	}{
		{0, 0, 0, ""},
		{day, 0, 10 * day, ""},
		{time.Minute, 0, time.Hour, ""}, // at least an hour by default
		{day, 2 * day, 2 * day, ""},
		{time.Second, time.Minute, time.Minute, ""},
		{0, time.Hour, 0, "--keep needs --per"},
		{1500 * time.Millisecond, 0, 0, "invalid --per 1.5s"},
		{maxPer + time.Hour, 0, 0, "invalid --per"},
		{day, day, 0, "invalid --keep 24h0m0s: from twice --per (48h0m0s)"},
		{time.Second, 30 * time.Second, 0, "invalid --keep 30s"},
	} {
		got, err := perFlags(tc.per, tc.keep)
		if tc.err != "" {
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
			var ee *exitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, exitUsage, ee.code)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "--per %v --keep %v", tc.per, tc.keep)
	}
}
