package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStopTiming: SIGTERM at D − kill-after − 1 s, SIGKILL at D − 1 s; a
// stop that begins earlier kills kill-after later, never after D − 1 s.
func TestStopTiming(t *testing.T) {
	s := stopTiming{killAfter: 3 * time.Second, margin: killMargin}
	d := int64(100 * time.Second)
	assert.Equal(t, int64(96*time.Second), s.termAt(d))
	assert.Equal(t, int64(99*time.Second), s.killAt(d))
	assert.Equal(t, int64(53*time.Second), s.killAfterStop(int64(50*time.Second), d), "an early stop: kill-after later")
	assert.Equal(t, int64(99*time.Second), s.killAfterStop(int64(98*time.Second), d), "never after the kill point")
	assert.Equal(t, int64(99*time.Second), s.killAfterStop(int64(120*time.Second), d)-0, "past the kill point: the kill point (already due)")
}

// TestStopTimingFlags: the defaults fit, the longest kill-after per lease
// leaves a due renewal an attempt and a retry before SIGTERM, and longer
// ones are refused naming both flags.
func TestStopTimingFlags(t *testing.T) {
	require.NoError(t, checkStopTiming(15*time.Second, defaultKillAfter))
	require.NoError(t, checkStopTiming(15*time.Second, 0))
	for lease, most := range map[time.Duration]time.Duration{
		15 * time.Second: 4250 * time.Millisecond, 30 * time.Second: 13500 * time.Millisecond, 60 * time.Second: 32 * time.Second,
	} {
		require.NoError(t, checkStopTiming(lease, most), "lease %v", lease)
		err := checkStopTiming(lease, most+250*time.Millisecond)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "--kill-after")
		assert.Contains(t, err.Error(), "--lease-duration")
		s := scheduleFor(lease, most)
		assert.GreaterOrEqual(t, s.slack, renewRoom, "a due renewal has an attempt and a retry before SIGTERM (lease %v)", lease)
		assert.Less(t, s.kill, s.leaseEnds, "SIGKILL before the lease can pass on")
	}
	require.Error(t, checkStopTiming(15*time.Second, -time.Second))
}

// TestStopTableInDocs: the package documentation and docs/command.md show
// the table stopTable computes.
func TestStopTableInDocs(t *testing.T) {
	b, err := os.ReadFile("main.go")
	require.NoError(t, err)
	doc := string(b)
	b, err = os.ReadFile("../../docs/command.md")
	require.NoError(t, err)
	page := string(b)
	for _, row := range strings.Split(strings.TrimRight(stopTable(), "\n"), "\n") {
		assert.Contains(t, doc, "//\t"+strings.TrimPrefix(row, "  "), "main.go's table matches stopTable()")
		assert.Contains(t, page, "\n"+row+"\n", "docs/command.md's table matches stopTable()")
	}
}
