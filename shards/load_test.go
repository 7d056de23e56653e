package shards

// The load's smoothing and its compact form in metadata.

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadMeter: the first report is taken as it is; a fall shows half
// after LoadHalfLife and 7/8 after three, and so does a rise within
// LoadRiseStep; a larger rise shows within about LoadRiseHalfLife; reports
// at any pace give the same curve; zero counts; negative, NaN and infinite
// values are ignored; a carried value is held until the work reports.
func TestLoadMeter(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var m loadMeter
	_, ok := m.value(t0)
	assert.False(t, ok, "nothing known yet")
	m.set(20, t0)
	v, ok := m.value(t0)
	require.True(t, ok)
	assert.Equal(t, 20.0, v, "the first value as it is")
	m.set(10, t0)
	v, _ = m.value(t0.Add(LoadHalfLife))
	assert.InDelta(t, 15, v, 1e-9, "half the fall after a half-life")
	v, _ = m.value(t0.Add(3 * LoadHalfLife))
	assert.InDelta(t, 10+10.0/8, v, 1e-9, "7/8 after three")

	var r loadMeter
	r.set(10, t0)
	r.set(12, t0)
	v, _ = r.value(t0.Add(LoadHalfLife))
	assert.InDelta(t, 11, v, 1e-9, "a rise of 20 %: half after a half-life")
	var j loadMeter
	j.set(10, t0)
	j.set(100, t0)
	v, _ = j.value(t0.Add(LoadRiseHalfLife))
	assert.Greater(t, v, 50.0, "a tenfold rise: more than half within LoadRiseHalfLife")
	v, _ = j.value(t0.Add(4 * LoadRiseHalfLife))
	assert.Greater(t, v, 90.0, "and nearly all of it within four")

	// The same fall reported every 100 ms gives the same curve.
	var n loadMeter
	n.set(20, t0)
	for i := range 100 {
		n.set(10, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	v, _ = n.value(t0.Add(LoadHalfLife))
	assert.InDelta(t, 15, v, 1e-9)

	for _, bad := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		n.set(bad, t0.Add(LoadHalfLife))
	}
	v, _ = n.value(t0.Add(LoadHalfLife))
	assert.InDelta(t, 15, v, 1e-9, "invalid values ignored")
	n.set(0, t0.Add(LoadHalfLife))
	v, _ = n.value(t0.Add(2 * LoadHalfLife))
	assert.InDelta(t, 7.5, v, 1e-9, "zero is a load")

	var c loadMeter
	c.carry(42, t0)
	v, ok = c.value(t0.Add(time.Hour))
	assert.True(t, ok)
	assert.Equal(t, 42.0, v, "carried and held")
	c.set(0, t0.Add(time.Hour))
	v, _ = c.value(t0.Add(time.Hour + LoadHalfLife))
	assert.InDelta(t, 21, v, 1e-9, "from the carried value")
	c.carry(1, t0)
	v, _ = c.value(t0.Add(time.Hour + LoadHalfLife))
	assert.InDelta(t, 21, v, 1e-9, "a carry after a report changes nothing")

	var nilMeter *loadMeter
	nilMeter.set(1, t0)
	_, ok = nilMeter.value(t0)
	assert.False(t, ok)
	var s *Shard
	s.SetLoad(1)
	_, ok = s.Load()
	assert.False(t, ok, "a nil Shard has no load")
	_, ok = (&Shard{}).Load()
	assert.False(t, ok, "nor a zero one")
	(&Shard{}).SetLoad(1)
}

// TestLoadCodes: every value reads back within 0.5 %, zero as zero, out of
// range clamped; two characters each.
func TestLoadCodes(t *testing.T) {
	for _, v := range []float64{1e-6, 3.3e-5, 0.01, 1, 2.5, 99.9, 1234.5, 1e6, 3e9, 1e11} {
		e := encodeLoad(v)
		require.Len(t, e, 2)
		got, ok := decodeLoad(e)
		require.True(t, ok)
		assert.InEpsilon(t, v, got, 0.005, "%v → %q → %v", v, e, got)
	}
	got, ok := decodeLoad(encodeLoad(0))
	assert.True(t, ok)
	assert.Zero(t, got)
	got, _ = decodeLoad(encodeLoad(1e-9))
	assert.Equal(t, loadMin, got, "below the range: the smallest")
	got, _ = decodeLoad(encodeLoad(1e30))
	assert.Equal(t, loadOfCode(loadCodes-1), got, "above: the largest")
	for _, bad := range []string{"", "0", "000", "0!", " 0"} {
		_, ok := decodeLoad(bad)
		assert.False(t, ok, "%q", bad)
	}
	assert.Len(t, loadKey(strings.Repeat("%", 1015)), loadKeyLen)
	assert.NotEqual(t, loadKey("0"), loadKey("1"))
}

// FuzzParseLoads: a membership's loads, written by anyone, never panic
// the reader, and every value read is a valid load.
func FuzzParseLoads(f *testing.F) {
	f.Add("abcdef00ABCDEF_-", "3:1A")
	f.Add("", "")
	f.Add("short", "x:yy")
	f.Add("abcdef0", "4096:__")
	f.Fuzz(func(t *testing.T, loads, rest string) {
		for k, v := range parseLoads(loads) {
			if len(k) != loadKeyLen || !validLoad(v) {
				t.Fatalf("%q: key %q load %v", loads, k, v)
			}
		}
		if n, mean, ok := parseRest(rest); ok && (n < 1 || n > MaxShards || !validLoad(mean)) {
			t.Fatalf("%q: %d, %v", rest, n, mean)
		}
		if v, ok := decodeLoad(rest); ok && !validLoad(v) {
			t.Fatalf("%q: %v", rest, v)
		}
	})
}

// TestLoadJumpShowsWhole: a load that jumps tenfold, looked at every
// second as the polls do, shows at 95 % or more within 10 s and stays
// there (it showed about three quarters for 10 s and more, then crept up
// with the slow half-life: the balancer planned on a load short by a
// quarter, and again as it crept); noise of ±20 % afterwards does not
// make it follow the peaks for long: within 5 % of the mean a minute on.
func TestLoadJumpShowsWhole(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var m loadMeter
	m.set(1, t0)
	for i := 1; i <= 30; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		m.set(10, now)
		v, _ := m.value(now)
		if i >= 10 {
			assert.GreaterOrEqual(t, v, 9.5, "%d s after the jump", i)
		}
	}
	noise := []float64{1.2, 0.8, 1.1, 0.9, 1.19, 0.81, 1.0, 1.15, 0.85}
	for i := 31; i <= 90; i++ {
		m.set(10*noise[i%len(noise)], t0.Add(time.Duration(i)*time.Second))
	}
	v, _ := m.value(t0.Add(90 * time.Second))
	assert.InDelta(t, 10, v, 0.5)
}
