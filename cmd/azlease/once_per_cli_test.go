//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOncePerFromFiveHosts: the crontab line of five hosts that fire 1.5 s
// apart, for a job that takes 1 s. 'azlease once --per' runs it once in the
// period, and again in the next; 'lock --no-wait', which only keeps two from
// running at once, lets most of them run it, each after the previous one
// finished.
func TestOncePerFromFiveHosts(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		const per = 12 * time.Second
		log := w.path("log")
		job := fmt.Sprintf(`echo "ran $AZLEASE_NAME" >> %s; sleep 1`, log)
		fire := func(args ...string) []*proc {
			var ps []*proc
			for i := range 5 {
				if i > 0 {
					time.Sleep(1500 * time.Millisecond)
				}
				ps = append(ps, w.az(append(append([]string{args[0], fast, "--identity", fmt.Sprintf("host%d", i)}, args[1:]...), "--", "sh", "-c", job)...))
			}
			return ps
		}
		// Start early in a period: the five fire within its first 7 s.
		time.Sleep(time.Until(time.Now().Truncate(per).Add(per + 200*time.Millisecond)))
		period := time.Now().UTC().Truncate(per)
		for _, p := range fire("once", "--per", per.String(), "nightly") {
			p.expect(0, 30*time.Second)
		}
		key := "nightly/" + period.Format(perFormat)
		require.Equal(t, []string{"ran " + key}, lines(t, log), "once in the period")

		// The next period runs it again, once.
		time.Sleep(time.Until(period.Add(per + 200*time.Millisecond)))
		for _, p := range fire("once", "--per", per.String(), "nightly") {
			p.expect(0, 30*time.Second)
		}
		next := "nightly/" + period.Add(per).Format(perFormat)
		require.Equal(t, []string{"ran " + key, "ran " + next}, lines(t, log), "once in the next period")
		st := w.run(10*time.Second, "status", "--json", next)
		var s statusJSON
		require.NoError(t, json.Unmarshal([]byte(st.stdout()), &s), st.stdout())
		require.NotNil(t, s.Once)
		assert.Equal(t, "done", s.Once.State)

		// lock --no-wait: every host that fires after the previous run
		// ended runs it too.
		ran := 0
		for _, p := range fire("lock", "--no-wait", "nightly-lock") {
			p.wait(30 * time.Second)
			switch p.status() {
			case 0:
				ran++
			case exitNotAcquired:
			default:
				t.Fatalf("lock --no-wait exited %d: %s", p.status(), p.stderr())
			}
		}
		locked := 0
		for _, l := range lines(t, log) {
			if strings.HasPrefix(l, "ran nightly-lock") {
				locked++
			}
		}
		assert.Equal(t, ran, locked)
		assert.GreaterOrEqual(t, locked, 3, "lock --no-wait ran the job on most hosts")
		t.Logf("once --per: 1 run per period; lock --no-wait: %d runs of 5", locked)
	})
}
