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
		return fmt.Sprintf("%s | %s | not run | | | | | ", c.v.name, c.v.timing)
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
	mv := fmt.Sprintf("+%d", quantile(moves, 0.5))
	if mx := slices.Max(moves); mx != quantile(moves, 0.5) {
		mv += fmt.Sprintf(" (max +%d)", mx)
	}
	return fmt.Sprintf("%s | %s | %s | %d | %.1f / %.1f | %.0f | %d",
		c.v.name, c.v.timing, bal, c.results[0].min, quantile(twice, 0.5), slices.Max(twice), quantile(perH, 0.5), quantile(failed, 0.5)) + " | " + mv
}

// quantile returns the p-quantile of xs (nearest rank, lower).
func quantile[T int | int64 | float64](xs []T, p float64) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// writeReport writes the section folded into bench/results.md.
func writeReport(b *strings.Builder, cells []*cell, seeds int, took time.Duration) {
	fmt.Fprintf(b, "Machine: %s, %d logical CPUs, %s/%s, %s; %d seeds per row, all rows in this one run (%v of real time).\n\n",
		hostinfo.CPUModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), seeds, took.Round(time.Second))
	fmt.Fprintf(b, "| scenario | balancer | timing | balanced after p50 / p90 | min moves | shard-s owned twice p50 / max | requests per replica-hour | 4xx p50 | moves beside the min p50 |\n")
	fmt.Fprintf(b, "|---|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, c := range cells {
		fmt.Fprintf(b, "| %s | %s |\n", c.sc, c.row())
	}
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
