package azlease_test

// The benchmark of planned succession (issue 26), in fake time on the
// emulator: the leaderless time of a planned stop with today's release and
// with the hand-off, leader changes and leaderless time in rolling deploys,
// and how soon a preferred candidate leads. `make bench` writes its tables
// into bench/results.md, with the wire figures of the multi-process rolling
// deploys (TestLeadRollingDeploy, TestMultiProcessRollingDeploy).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// plannedStop measures one planned stop of the leader with standbys
// standbys, at a random phase of the polls: the leaderless time (from the
// end of the old leader's term to the start of the new one's, as their
// tasks saw them), and how long Stop took.
func plannedStop(t *testing.T, standbys int, noSuccession bool, seed uint64) (gap, stop time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 0x5709))
		c := newSuccessionCluster(t, azlease.ElectorOptions{NoSuccession: noSuccession})
		a := c.start("leader", nil)
		c.waitFor("leader", time.Minute)
		for i := range standbys {
			c.start(fmt.Sprintf("standby-%d", i), nil)
			time.Sleep(time.Duration(rng.Int64N(int64(5 * time.Second))))
		}
		time.Sleep(20*time.Second + time.Duration(rng.Int64N(int64(15*time.Second))))
		began := time.Now()
		require.NoError(t, a.Stop(context.Background()))
		stop = time.Since(began)
		for range 600 {
			if len(c.leaders()) == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		c.stopAll()
		gaps, _ := c.gaps()
		require.Len(t, gaps, 1)
		gap = gaps[0]
	})
	return gap, stop
}

// deployMode is how the replicas of a simulated rolling deploy are set up.
type deployMode struct {
	name         string
	noSuccession bool
	priorities   bool
}

// rollingDeployFake replaces n replicas one by one in fake time, new one
// first, the new one started 1.5–4 s before the old one is stopped (and up to
// a second after the previous old one stopped), default options; it returns the leader changes during the deploy, the leaderless
// time they cost, and whether a new replica leads at the end.
func rollingDeployFake(t *testing.T, n int, mode deployMode, seed uint64) (changes int, leaderless time.Duration, finalNew bool) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 0xd3910))
		c := newSuccessionCluster(t, azlease.ElectorOptions{NoSuccession: mode.noSuccession})
		opts := func(gen int) *azlease.ElectorOptions {
			o := c.opts
			if mode.priorities {
				o.Priority = gen
			}
			return &o
		}
		old := make([]*azlease.Elector, n)
		for i := range old {
			old[i] = c.start(fmt.Sprintf("old-%d", i), opts(1))
			time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second))))
		}
		c.waitLeader(time.Minute)
		time.Sleep(20*time.Second + time.Duration(rng.Int64N(int64(60*time.Second))))
		began := time.Now()
		for i, j := range rng.Perm(n) {
			c.start(fmt.Sprintf("new-%d", i), opts(2))
			time.Sleep(1500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond))))
			require.NoError(t, old[j].Stop(context.Background()))
			// The next new replica is scheduled a moment later.
			time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
		}
		time.Sleep(30 * time.Second)
		ended := time.Now()
		l := c.leaders()
		finalNew = len(l) == 1 && strings.HasPrefix(l[0], "new-")
		c.stopAll()
		c.checkSafety()
		c.mu.Lock()
		terms := append([]believed(nil), c.terms...)
		c.mu.Unlock()
		sortBelieved(terms)
		for i := 1; i < len(terms); i++ {
			if terms[i].start.After(began) && terms[i].start.Before(ended) {
				changes++
				leaderless += terms[i].start.Sub(terms[i-1].end)
			}
		}
	})
	return changes, leaderless, finalNew
}

// preferredAppears measures how long after a candidate of higher priority
// starts it leads (the leader's term well past its Cooldown), and the
// leaderless time of that move.
func preferredAppears(t *testing.T, seed uint64) (took, gap time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 0x9ef))
		c := newSuccessionCluster(t, azlease.ElectorOptions{})
		c.start("low", nil)
		c.waitFor("low", time.Minute)
		time.Sleep(2*time.Minute + time.Duration(rng.Int64N(int64(15*time.Second))))
		c.start("high", c.withPriority(1))
		took = c.waitFor("high", 2*time.Minute)
		c.stopAll()
		gaps, _ := c.gaps()
		require.Len(t, gaps, 1)
		gap = gaps[0]
	})
	return took, gap
}

// TestSuccessionBench measures planned succession against today's release
// in the same run. With AZLEASE_SUCCESSION_REPORT set it appends its tables
// there, and the wire rows AZLEASE_ROLLING_REPORT holds (written by the
// multi-process rolling deploy tests), if any.
func TestSuccessionBench(t *testing.T) {
	azlease.HeavyTest(t)
	runs, deploys := 100, 30
	switch {
	case testing.Short():
		runs, deploys = 10, 4
	case os.Getenv("AZLEASE_SUCCESSION_REPORT") == "":
		runs, deploys = 30, 10 // make test: the checks below, not the report's figures
	}
	var b strings.Builder
	fmt.Fprintf(&b, "In fake time (testing/synctest) on the emulator, default options (15 s lease, followers polling every 5 s ± 20 %%,\n")
	fmt.Fprintf(&b, "StabilityWindow 30 s, Cooldown 1 min, SuccessorPollInterval 200 ms), no faults; the leader's task returns at once\n")
	fmt.Fprintf(&b, "when its term ends (no drain). Leaderless time: from the end of the old leader's term (its task's context) to\n")
	fmt.Fprintf(&b, "the start of the new leader's task. \"Today's release\" is NoSuccession: the stopping leader releases the lease and a\n")
	fmt.Fprintf(&b, "standby finds it free at its next poll. Each stop at a random phase of the polls.\n\n")

	fmt.Fprintf(&b, "### A planned stop of the leader (%d stops each)\n\n", runs)
	fmt.Fprintf(&b, "| standbys | stop | leaderless: median | p90 | max | Stop returned after: median | max |\n|---:|---|---:|---:|---:|---:|---:|\n")
	for _, standbys := range []int{1, 4} {
		for _, noSucc := range []bool{true, false} {
			var gaps, stops []time.Duration
			for run := range runs {
				g, s := plannedStop(t, standbys, noSucc, uint64(run))
				gaps, stops = append(gaps, g), append(stops, s)
			}
			name := map[bool]string{true: "today's release", false: "hand-off"}[noSucc]
			fmt.Fprintf(&b, "| %d | %s | %v | %v | %v | %v | %v |\n", standbys, name, rd(quantile(gaps, 0.5)), rd(quantile(gaps, 0.9)), rd(quantile(gaps, 1)),
				rd(quantile(stops, 0.5)), rd(quantile(stops, 1)))
			t.Logf("planned stop, %d standbys, %s: leaderless %s, Stop %s", standbys, name, percentiles(gaps), percentiles(stops))
		}
	}

	fmt.Fprintf(&b, "\n### Rolling deploys of 5 replicas (%d deploys each)\n\n", deploys)
	fmt.Fprintf(&b, "Each replica replaced new one first, the new one started 1.5–4 s before the old one is stopped and 0–1 s after the\n")
	fmt.Fprintf(&b, "previous old one stopped (old ones in a random order); \"priority from the version\": the new generation has Priority 2,\n")
	fmt.Fprintf(&b, "the old one 1. Leader changes are counted from the deploy's start to 30 s after its last stop.\n\n")
	fmt.Fprintf(&b, "| replicas | leader changes: 1 | 2 | 3 or more | mean | total leaderless: median | p90 | max | new generation leads at the end |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, mode := range []deployMode{
		{name: "today's release", noSuccession: true},
		{name: "hand-off, no priorities"},
		{name: "hand-off, priority from the version", priorities: true},
	} {
		hist := map[int]int{}
		var total []time.Duration
		sum, newAtEnd := 0, 0
		for d := range deploys {
			ch, ll, fin := rollingDeployFake(t, 5, mode, uint64(d))
			hist[min(ch, 3)]++
			sum += ch
			total = append(total, ll)
			if fin {
				newAtEnd++
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.2f | %v | %v | %v | %d of %d |\n", mode.name, hist[1], hist[2], hist[3], float64(sum)/float64(deploys),
			rd(quantile(total, 0.5)), rd(quantile(total, 0.9)), rd(quantile(total, 1)), newAtEnd, deploys)
		t.Logf("rolling deploy, %s: changes %v, leaderless %s, new generation at the end %d/%d", mode.name, hist, percentiles(total), newAtEnd, deploys)
	}

	fmt.Fprintf(&b, "\n### A preferred candidate appears (%d runs)\n\n", runs)
	var tooks, gaps []time.Duration
	for run := range runs {
		tk, g := preferredAppears(t, uint64(run))
		tooks, gaps = append(tooks, tk), append(gaps, g)
	}
	fmt.Fprintf(&b, "A candidate of higher priority starts while the leader's term is past its Cooldown; it leads after the\n")
	fmt.Fprintf(&b, "StabilityWindow (30 s, counted from when it published its candidacy: by its own clock, within the second storage's\nclock gives) and a hand-off.\n\n")
	fmt.Fprintf(&b, "| | median | p90 | max |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| from its start to leading | %v | %v | %v |\n", rd(quantile(tooks, 0.5)), rd(quantile(tooks, 0.9)), rd(quantile(tooks, 1)))
	fmt.Fprintf(&b, "| leaderless | %v | %v | %v |\n", rd(quantile(gaps, 0.5)), rd(quantile(gaps, 0.9)), rd(quantile(gaps, 1)))
	t.Logf("preferred candidate: leads after %s, leaderless %s", percentiles(tooks), percentiles(gaps))

	if rows := os.Getenv("AZLEASE_ROLLING_REPORT"); rows != "" {
		if body, err := os.ReadFile(rows); err == nil && len(body) > 0 {
			fmt.Fprintf(&b, "\n### Rolling deploys of 5 on the wire (one deploy each, measured in the same run)\n\n")
			fmt.Fprintf(&b, "Real processes on one machine (2 shared cores), the emulator served on loopback, default poll interval: each\n")
			fmt.Fprintf(&b, "replica replaced new process first, the new one started 1.5–4 s before the old one's SIGTERM. Leaderless time from\n")
			fmt.Fprintf(&b, "the CLOCK_MONOTONIC stamps of the leaders' work: the old CMD's stop to the new CMD's start ('azlease lead'), the\n")
			fmt.Fprintf(&b, "last action of one term to the first of the next (library processes, acting every 10 ms).\n\n")
			fmt.Fprintf(&b, "| processes | leader changes | total leaderless |\n|---|---:|---:|\n")
			b.Write(body)
		}
	}

	report := os.Getenv("AZLEASE_SUCCESSION_REPORT")
	if report == "" {
		return
	}
	old, _ := os.ReadFile(report)
	require.NoError(t, os.WriteFile(report, append(old, b.String()...), 0o644))
}

func rd(d time.Duration) time.Duration {
	if d > 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func sortBelieved(terms []believed) {
	for i := 1; i < len(terms); i++ {
		for j := i; j > 0 && terms[j].start.Before(terms[j-1].start); j-- {
			terms[j], terms[j-1] = terms[j-1], terms[j]
		}
	}
}
