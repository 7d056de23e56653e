package shardbench

// The benchmark as a test: the smoke version by default, the full version
// (and its table) with AZLEASE_SHARDBENCH_REPORT set.

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/azlease/azlease/internal/hostinfo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scenarios are the benchmark's, in the table's order.
func scenarios(full bool) []scenario {
	var out []scenario
	sizes := [][2]int{{32, 4}, {128, 8}}
	if !full {
		sizes = [][2]int{{10, 3}} // with remainders, as 32 over 3 and 5 replicas have
	}
	for _, kn := range sizes {
		for _, ev := range []string{"cold", "join", "stop", "crash"} {
			out = append(out, scenario{event: ev, k: kn[0], n: kn[1]})
		}
	}
	return out
}

// cell is one scenario for one variant, over every seed.
type cell struct {
	sc      scenario
	v       variant
	results []result
}

// TestShardBench runs every scenario for every balancer. Without
// AZLEASE_SHARDBENCH_REPORT it is a smoke test: one seed of each scenario
// on 10 shards and 3 replicas, with shorter quiet periods, asserting only that every cell produced figures and that
// azlease never owned a shard twice (its believed intervals checked
// against the emulator's grants too). With it, it runs
// AZLEASE_SHARDBENCH_SEEDS seeds (default 20) of every scenario and
// writes the table there.
func TestShardBench(t *testing.T) {
	report := os.Getenv("AZLEASE_SHARDBENCH_REPORT")
	full := report != ""
	seeds := 1
	if full {
		seeds = 20
		if s, err := strconv.Atoi(os.Getenv("AZLEASE_SHARDBENCH_SEEDS")); err == nil && s > 0 {
			seeds = s
		}
	}
	began := time.Now()
	var cells []*cell
	for _, sc := range scenarios(full) {
		for _, v := range variants() {
			if !full {
				v.hold /= 4 // only that figures come out
			}
			c := &cell{sc: sc, v: v}
			cells = append(cells, c)
			for seed := range uint64(seeds) {
				name := fmt.Sprintf("%s/%s %s/%d", sc, v.name, v.timing, seed)
				t.Run(name, func(t *testing.T) {
					r := run(t, sc, v, seed)
					c.results = append(c.results, r)
					switch {
					case !r.balanced:
						t.Errorf("not balanced within %v of the event", v.limit)
					case r.moves == 0 || r.perReplicaH <= 0:
						t.Errorf("missing figures: %+v", r)
					}
					if v.azlease && (r.twice != 0 || r.violations != 0) {
						t.Errorf("azlease owned a shard twice: %v owned twice, %d shards with violations: %s", r.twice, r.violations, r.violationText)
					}
				})
			}
			if testing.Verbose() || full {
				t.Logf("%s | %s", sc, c.row())
			}
		}
	}
	if !full {
		return
	}
	var b strings.Builder
	writeReport(&b, cells, seeds, time.Since(began))
	if err := os.WriteFile(report, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// row is a cell's figures in the table's columns after the scenario.
func (c *cell) row() string {
	if len(c.results) == 0 {
		return fmt.Sprintf("%s | %s | not run | | | | ", c.v.name, c.v.timing)
	}
	var after, twice, perH []float64
	var moves []int
	var failed []int64
	notBalanced := 0
	for _, r := range c.results {
		if r.balanced {
			after = append(after, r.balanceAfter.Seconds())
		} else {
			notBalanced++
		}
		moves = append(moves, r.moves-r.min)
		twice = append(twice, r.twice.Seconds())
		perH = append(perH, r.perReplicaH)
		failed = append(failed, r.failed)
	}
	bal := "—"
	if len(after) > 0 {
		bal = fmt.Sprintf("%.1f / %.1f s", quantile(after, 0.5), quantile(after, 0.9))
	}
	if notBalanced > 0 {
		bal += fmt.Sprintf(" (%d of %d never)", notBalanced, len(c.results))
	}
	mv := fmt.Sprintf("%+d / %+d (%d)", quantile(moves, 0.5), slices.Max(moves), c.results[0].min)
	return fmt.Sprintf("%s | %s | %s | %s | %.1f / %.1f | %.0f | %d",
		c.v.name, c.v.timing, bal, mv, quantile(twice, 0.5), slices.Max(twice), quantile(perH, 0.5), quantile(failed, 0.5))
}

// quantile returns the p-quantile of xs (nearest rank, lower).
func quantile[T ~int | ~int64 | ~float64](xs []T, p float64) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// writeReport writes the section folded into bench/results.md.
func writeReport(b *strings.Builder, cells []*cell, seeds int, took time.Duration) {
	fmt.Fprintf(b, "azlease's `shards.Group` (defaults: poll 2 s ± 20 %%, 15 s leases, settle 2.4 s) and `internal/ehbalance`, azlease's own\n")
	fmt.Fprintf(b, "implementation of the Event Hubs processors' load balancer (written from the Go processor's documentation and source:\n")
	fmt.Fprintf(b, "one ownership blob per shard, claims by ETag-conditional metadata writes, expiry when the server's Last-Modified is\n")
	fmt.Fprintf(b, "older than the expiration by the local clock, owners = distinct owners of live records plus self), with its balanced\n")
	fmt.Fprintf(b, "strategy (one claim per cycle) and greedy strategy (up to its share per cycle), at the Event Hubs defaults (update\n")
	fmt.Fprintf(b, "interval 10 s × 0.8–1.3, expiration 60 s) and at azlease's timing (2 s × 0.8–1.3, 15 s). Each run is one seed of one\n")
	fmt.Fprintf(b, "scenario in fake time (testing/synctest) on the emulator through the real azblob client; %d seeds per row, every row in\n", seeds)
	fmt.Fprintf(b, "this one run (%v of real time on %s, %d logical CPUs, %s/%s, %s).\n\n",
		took.Round(time.Second), hostinfo.CPUModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(b, "- **Scenarios.** Cold start: N replicas start at random instants within 1 s, timed from the first. Otherwise N replicas\n")
	fmt.Fprintf(b, "  start the same way, the group stays balanced for a quiet period, and at a random phase of the poll cycle one replica\n")
	fmt.Fprintf(b, "  joins, stops cleanly (azlease: `Stop`, which ends the work and releases; Event Hubs: close, which relinquishes), or\n")
	fmt.Fprintf(b, "  crashes (Event Hubs: the processor dies without a request; azlease: its machine is cut off (`Partition`,\n")
	fmt.Fprintf(b, "  requests hang), so its work runs on until each term's validity deadline — the harder case).\n")
	fmt.Fprintf(b, "- **Believed ownership.** azlease: while a shard's work runs, from its start until its context ends, cut at the term's\n")
	fmt.Fprintf(b, "  validity deadline, and checked against the emulator's lease grants (`azleasetest.CheckIntervals`). Event Hubs: from\n")
	fmt.Fprintf(b, "  a successful claim until the processor's next cycle no longer holds it, or it stops (the Go processor relies on the\n")
	fmt.Fprintf(b, "  Event Hubs service to end the old owner's receiver; a shard of generic work has no such service, so a stolen shard\n")
	fmt.Fprintf(b, "  runs on both sides until the victim's next cycle).\n")
	fmt.Fprintf(b, "- **Balanced after**: from the event until the group became balanced for good (every shard believed by exactly one\n")
	fmt.Fprintf(b, "  live replica, each owning ⌊K/N⌋ or ⌈K/N⌉) and stayed so for the rest of the run (a quiet period of 1 min at 2 s,\n")
	fmt.Fprintf(b, "  4 min at 10 s); p50 and p90 over the seeds.\n")
	fmt.Fprintf(b, "- **Moves**: replicas that began to believe they own a shard whose owner was another (the first owner of a cold\n")
	fmt.Fprintf(b, "  start too), from the event on, beside the fewest that balance the group from the state at the event (given in\n")
	fmt.Fprintf(b, "  brackets: K for a cold start, 6 and 14 for the joins, the leaver's shards otherwise).\n")
	fmt.Fprintf(b, "- **Shard-s owned twice**: the time two replicas or more believed they owned a shard, summed over shards, from the\n")
	fmt.Fprintf(b, "  event on.\n")
	fmt.Fprintf(b, "- **Requests per replica-hour**: all requests of the live replicas over the second half of the final quiet period\n")
	fmt.Fprintf(b, "  (balanced, nothing happening), per replica; azlease's documented formula is 3600/P + (1 + S) × 3600/(0.95 × D/3).\n")
	fmt.Fprintf(b, "- **4xx**: answers 400–499 to any replica from the event to the end of the run; their causes are listed below the table.\n\n")
	fmt.Fprintf(b, "| scenario | balancer | timing (interval, expiry) | balanced after p50 / p90 | moves beside the min p50 / max (min) | shard-s owned twice p50 / max | requests per replica-hour | 4xx p50 |\n")
	fmt.Fprintf(b, "|---|---|---|---|---:|---:|---:|---:|\n")
	for _, c := range cells {
		fmt.Fprintf(b, "| %s | %s |\n", c.sc, c.row())
	}
	fmt.Fprintf(b, "\nazlease's targets (issue 20; P = 2.4 s the longest jittered poll, D = 15 s, d = 0 here): cold start 2P + 1 s = 5.8 s\n")
	fmt.Fprintf(b, "after the last start (6.8 s from the first), join 2P + d + 1 s = 5.8 s, clean stop d + P + 1 s = 3.4 s, crash D + 2P + 1 s\n")
	fmt.Fprintf(b, "= 20.8 s; moves the minimum; 0 shard-seconds owned twice.\n")
	fmt.Fprintf(b, "\nThe 4xx answers from the event on, summed over the seeds of each row that had any:\n\n")
	for _, c := range cells {
		if line := c.failures(); line != "" {
			fmt.Fprintf(b, "- %s, %s, %s: %s\n", c.sc, c.v.name, c.v.timing, line)
		}
	}
}

// failures lists a cell's 4xx answers by operation and code, most first.
func (c *cell) failures() string {
	sum := map[string]int{}
	for _, r := range c.results {
		for k, n := range r.codes {
			sum[k] += n
		}
	}
	keys := slices.Collect(maps.Keys(sum))
	slices.SortFunc(keys, func(a, b string) int {
		if sum[a] != sum[b] {
			return sum[b] - sum[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d × %s", sum[k], k))
	}
	return strings.Join(parts, ", ")
}
