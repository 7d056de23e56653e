package main

// The markdown the program writes: what was run and where, then one table
// per scenario, a row per contender (and W, or way of dying). It has no
// top-level heading: internal/bench puts it under one in bench/results.md.

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/azlease/azlease/internal/hostinfo"
)

// cell is what one contender gave in one scenario, over the repetitions.
type cell struct {
	orders []orderRun
	costs  []costRun
	tps    []throughputRun
	gaps   []time.Duration // dead-waiter scenario: from the holder's Unlock returning
	// deadCalled is the dead-waiter scenario's gaps from the Unlock call.
	deadCalled []time.Duration
	holds      []holdsRun
	passovers  []passoverRun
	deadQueues []deadQueueRun
	err        error // the first error; no further repetition ran
}

// results is a whole run.
type results struct {
	p          params
	contenders []contender
	notBuilt   map[string]bool  // by contender key
	cells      map[string]*cell // by cellKey
	start, end time.Time
	loadStart  string
	loadEnd    string
}

func orderKey(c string, w int) string { return fmt.Sprintf("%s/order/%d", c, w) }
func throughputKey(c string) string   { return c + "/throughput" }
func costKey(c string) string         { return c + "/cost" }
func deadKey(c, how string) string    { return c + "/dead/" + how }
func holdsKey(c string, h time.Duration, w int) string {
	return fmt.Sprintf("%s/holds/%v/%d", c, h, w)
}
func passoverKey(c, how string) string   { return c + "/passover/" + how }
func deadQueueKey(c, v string) string    { return c + "/deadq/" + v }
func (r *results) cell(key string) *cell { return r.cells[key] }

// loadAverage is the first three fields of /proc/loadavg, or "unknown".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// moduleVersion is the version of module path in this binary, or "?".
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil && d.Replace.Version != "" {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "?"
}

func machine(r *results) string {
	kernel := "unknown kernel"
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		kernel = strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("Machine: %s, %d logical CPUs, %s, %s %s/%s; azblob %s, etcd %s. Run started %s UTC and took %s;\n"+
		"load average (1, 5, 15 min) %s at the start and %s at the end (the machine may be shared).\n",
		hostinfo.CPUModel(), runtime.NumCPU(), kernel, runtime.Version(), runtime.GOOS, runtime.GOARCH,
		moduleVersion("github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"), moduleVersion("go.etcd.io/etcd/server/v3"),
		r.start.UTC().Format("2006-01-02 15:04"), r.end.Sub(r.start).Round(time.Second), r.loadStart, r.loadEnd)
}

// render writes the report.
func render(r *results) string {
	var b strings.Builder
	p := r.p
	fmt.Fprintf(&b, "Written by `internal/lockbench` (`make bench`), every contender in one run on the same machine, repetitions\n")
	fmt.Fprintf(&b, "interleaved (each scenario's repetition runs every contender before the next one starts), %d repetition(s).\n", p.reps)
	fmt.Fprintf(&b, "Each waiter has a client of its own, as a separate process would: its own connections, and for etcd its own\n")
	fmt.Fprintf(&b, "session.\n\n")
	fmt.Fprintf(&b, "- **azlease fair Mutex**: `azlease.Mutex` with default options (fair: the first in line looks from every 5 ms as a\n")
	fmt.Fprintf(&b, "  hold begins to every 200 ms until it is 5 s old, then every 4 %% of its age up to 2 s (issue 35); the one right\n")
	fmt.Fprintf(&b, "  behind it as the first does while the hold is young, then every 2 s; those further back by the pace the lock\n")
	fmt.Fprintf(&b, "  record publishes, 10 ms per position at least, slower as the queue stands still, up to 60 s for the ten behind\n")
	fmt.Fprintf(&b, "  the first and 240 s further back; no holder passes a waiter over, the one behind it does once its schedule says\n")
	fmt.Fprintf(&b, "  it surely missed its turn; a 15 s lease), on the `azleasetest` emulator served over HTTP on a loopback port.\n")
	fmt.Fprintf(&b, "  Requests: every HTTP request of every client (the holder's renewals included); failed: no answer, or a 4xx or\n")
	fmt.Fprintf(&b, "  5xx one, except in the throughput scenario a request that the window's end cut off (for every contender).\n")
	fmt.Fprintf(&b, "- **azlease Mutex, Unordered**: `MutexOptions.Unordered`, the waiting before issue 25 (every waiter polls every 1 s\n")
	fmt.Fprintf(&b, "  ± 20 %%, the first to try after a release gets the lock), on the same emulator and clients.\n")
	fmt.Fprintf(&b, "- **etcd concurrency.Mutex**: on an embedded single-node etcd (`embed`, loopback ports, data in a temporary\n")
	fmt.Fprintf(&b, "  directory, fsync on, as etcd runs by default), sessions with a %v TTL (azlease's default lease duration; etcd's\n", p.etcdTTL)
	fmt.Fprintf(&b, "  default is 60 s). Requests: the clients' unary RPCs and the messages they send on streams (watches created, lease\n")
	fmt.Fprintf(&b, "  keep-alives, one per session every TTL/3), counted by gRPC interceptors; failed: an RPC or send that returned an\n")
	fmt.Fprintf(&b, "  error.\n")
	fmt.Fprintf(&b, "- **etcd concurrency.Mutex, no fsync**: the same with etcd's `UnsafeNoFsync`: the emulator keeps everything in\n")
	fmt.Fprintf(&b, "  memory, so this row compares the algorithms; the row above shows what etcd costs as it runs.\n\n")
	b.WriteString(machine(r))

	fmt.Fprintf(&b, "\n### Order: one holder, W waiters asking %v apart, every holder keeping the lock %v\n\n", p.spacing, p.hold)
	fmt.Fprintf(&b, "The first waiter asks as the holder takes the lock; the holder keeps it %v from then, as every waiter does once\n", p.hold)
	fmt.Fprintf(&b, "served. Overtakes: pairs of waiters served out of the order they asked (median over repetitions, range in\n")
	fmt.Fprintf(&b, "parentheses). Hand-off gap, as issue 25 defines it: from one holder's Unlock returning to the next one's Lock\n")
	fmt.Fprintf(&b, "returning, percentiles over every hand-off of every repetition (W per repetition); negative when the next Lock returns\n")
	fmt.Fprintf(&b, "first (a fair Unlock returned once the next holder's term showed, before issue 35; now once its hand-off is written). From Unlock called: the same from the\n")
	fmt.Fprintf(&b, "Unlock call, the latency the next waiter sees. Requests: every client's from the first asking to the last Unlock,\n")
	fmt.Fprintf(&b, "per acquisition.\n\n")
	fmt.Fprintf(&b, "| contender | W | overtakes | gap (Unlock returned) p50 | p90 | p99 | max | gap (Unlock called) p50 | p99 | max | requests per acquisition | failed | reps |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, w := range p.waiters {
		for _, c := range r.contenders {
			fmt.Fprintf(&b, "| %s | %d | ", c.name, w)
			ce := r.cell(orderKey(c.key, w))
			if bad := r.missing(c, ce, 11); bad != "" {
				b.WriteString(bad)
				continue
			}
			var over, per, failed []float64
			var gaps, called []time.Duration
			for _, o := range ce.orders {
				over = append(over, float64(o.overtakes()))
				gaps = append(gaps, o.gaps...)
				called = append(called, o.called...)
				per = append(per, float64(o.requests.sent)/float64(w))
				failed = append(failed, float64(o.requests.failed))
			}
			fmt.Fprintf(&b, "%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", withRange(over, 0),
				dur(quantile(gaps, 0.5)), dur(quantile(gaps, 0.9)), dur(quantile(gaps, 0.99)), dur(quantile(gaps, 1)),
				dur(quantile(called, 0.5)), dur(quantile(called, 0.99)), dur(quantile(called, 1)),
				withRange(per, 1), withRange(failed, 0), len(ce.orders))
		}
	}
	fmt.Fprintf(&b, "\nServed in the order (waiters numbered in the order they asked; the first repetition):\n\n")
	for _, w := range p.waiters {
		for _, c := range r.contenders {
			ce := r.cell(orderKey(c.key, w))
			if ce == nil || len(ce.orders) == 0 {
				continue
			}
			fmt.Fprintf(&b, "- %s, W = %d: %s\n", c.name, w, strings.Trim(fmt.Sprint(ce.orders[0].served), "[]"))
		}
	}

	fmt.Fprintf(&b, "\n### Cost: %d waiters behind a holder that keeps the lock\n\n", p.costWaiters)
	fmt.Fprintf(&b, "A holder takes the lock and keeps it; %d waiters, each on a client of its own, ask %v apart; in each window\n", p.costWaiters, p.spacing)
	fmt.Fprintf(&b, "(its start after the last has asked, and its length), every client's requests are counted, the holder's renewals\n")
	fmt.Fprintf(&b, "included (azlease: one every 5 s or a little sooner, about 0.21 a second). The fair Mutex's waiters behind the first\n")
	fmt.Fprintf(&b, "look less and less often the longer the queue stands still, down to the formula of docs/design/fair-locks.md within a minute of\n")
	fmt.Fprintf(&b, "its last move: the first in line 1/(0.95 × 2 s) (behind a hold over 50 s old; its jitter only shortens the wait) and\n")
	fmt.Fprintf(&b, "a listing every 30 s, ")
	fmt.Fprintf(&b, "right behind it 1/(2 × 1 s), positions 2 to 10 1/(15 × position × 1 s) each, further back\n")
	fmt.Fprintf(&b, "1/(150 × 1 s) each; plus the holder's renewals. Issue 25's target is the waiters' requests: at most the first's\n")
	fmt.Fprintf(&b, "poll rate + 1, %.2f a\n", 1/(0.95*2)+1)
	fmt.Fprintf(&b, "second; the formula less the renewals is %.2f.\n\n", fairCostFormula(p.costWaiters)-1/(0.95*5.0))
	fmt.Fprintf(&b, "| contender | waiters | window | requests/s, all clients | per waiter-second | failed | formula | reps |\n|---|---:|---|---:|---:|---:|---:|---:|\n")
	for _, c := range r.contenders {
		ce := r.cell(costKey(c.key))
		for wi, win := range p.costWindows {
			fmt.Fprintf(&b, "| %s | %d | %v | ", c.name, p.costWaiters, win)
			if bad := r.missing(c, ce, 5); bad != "" {
				b.WriteString(bad)
				continue
			}
			var rate, per, failed []float64
			for _, cr := range ce.costs {
				if wi >= len(cr.requests) {
					continue
				}
				x := float64(cr.requests[wi].sent) / win.length.Seconds()
				rate = append(rate, x)
				per = append(per, x/float64(cr.waiters))
				failed = append(failed, float64(cr.requests[wi].failed))
			}
			formula := "—"
			if c.key == "fair" {
				formula = num(fairCostFormula(p.costWaiters), 2)
			}
			fmt.Fprintf(&b, "%s | %s | %s | %s | %d |\n", withRange(rate, 2), withRange(per, 3), withRange(failed, 0), formula, len(rate))
		}
	}

	fmt.Fprintf(&b, "\n### Throughput: %d contenders, zero-length holds, %v\n\n", p.contenders, p.window)
	fmt.Fprintf(&b, "Each contender locks, unlocks at once and locks again, for the whole window. Requests are every client's in the\n")
	fmt.Fprintf(&b, "window. Medians over repetitions (range in parentheses); fewest–most is how many times one contender got the lock.\n")
	fmt.Fprintf(&b, "After %v: the same counts without the window's first %v (the contenders' races to create and acquire the\n", throughputWarmUp, throughputWarmUp)
	fmt.Fprintf(&b, "lock at first use), the steady state.\n\n")
	fmt.Fprintf(&b, "| contender | acquisitions/s | requests per acquisition | failed requests per acquisition | after %v: requests / failed per acquisition | per contender, fewest–most | reps |\n", throughputWarmUp)
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.contenders {
		fmt.Fprintf(&b, "| %s | ", c.name)
		ce := r.cell(throughputKey(c.key))
		if bad := r.missing(c, ce, 6); bad != "" {
			b.WriteString(bad)
			continue
		}
		var rate, per, failed, warmPer, warmFailed, fewest, most []float64
		for _, t := range ce.tps {
			n := float64(t.total())
			rate = append(rate, n/t.elapsed.Seconds())
			per = append(per, float64(t.requests.sent)/n)
			failed = append(failed, float64(t.requests.failed)/n)
			if t.warmAcquisitions > 0 {
				warmPer = append(warmPer, float64(t.warmRequests.sent)/float64(t.warmAcquisitions))
				warmFailed = append(warmFailed, float64(t.warmRequests.failed)/float64(t.warmAcquisitions))
			}
			fewest = append(fewest, float64(slices.Min(t.acquisitions)))
			most = append(most, float64(slices.Max(t.acquisitions)))
		}
		warmCell := "—"
		if len(warmPer) > 0 {
			warmCell = withRange(warmPer, 2) + " / " + withRange(warmFailed, 2)
		}
		fmt.Fprintf(&b, "%s | %s | %s | %s | %s–%s | %d |\n", withRange(rate, 1), withRange(per, 2), withRange(failed, 2), warmCell,
			num(median(fewest), 0), num(median(most), 0), len(ce.tps))
	}

	fmt.Fprintf(&b, "\n### A dead waiter's cost\n\n")
	fmt.Fprintf(&b, "A holder has the lock; a waiter asks, %v later the next one asks, %v later the first goes away, and %v\n", p.spacing, p.spacing, p.hold)
	fmt.Fprintf(&b, "later the holder unlocks: the gap to the next waiter's Lock returning, from the holder's Unlock returning (a fair\n")
	fmt.Fprintf(&b, "Unlock returned once the next holder's term showed before issue 35, so it was negative there) and from its Unlock call, beside the same\n")
	fmt.Fprintf(&b, "hand-off with nobody ahead. Cancelled: the waiter's Lock ctx is cancelled (it gives up, and may tidy up). Killed:\n")
	fmt.Fprintf(&b, "its process dies (no request of its reaches the service from then on, nothing is given back; for etcd, its client\n")
	fmt.Fprintf(&b, "closes without revoking its session, whose key then stays until the TTL runs out). Cost: the median gap from the\n")
	fmt.Fprintf(&b, "Unlock call less the same median with nobody ahead.\n\n")
	fmt.Fprintf(&b, "| contender | the waiter ahead | gap (Unlock returned) p50 | max | gap (Unlock called) p50 | max | cost | reps |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.contenders {
		base := r.cell(deadKey(c.key, deadNone))
		for _, how := range deadHows {
			label := map[string]string{deadNone: "none (baseline)", deadCanceled: "cancelled", deadKilled: "killed"}[how]
			fmt.Fprintf(&b, "| %s | %s | ", c.name, label)
			ce := r.cell(deadKey(c.key, how))
			if bad := r.missing(c, ce, 6); bad != "" {
				b.WriteString(bad)
				continue
			}
			cost := "—"
			if how != deadNone && base != nil && base.err == nil && len(base.deadCalled) > 0 {
				cost = dur(quantile(ce.deadCalled, 0.5) - quantile(base.deadCalled, 0.5))
			}
			fmt.Fprintf(&b, "%s | %s | %s | %s | %s | %d |\n", dur(quantile(ce.gaps, 0.5)), dur(quantile(ce.gaps, 1)),
				dur(quantile(ce.deadCalled, 0.5)), dur(quantile(ce.deadCalled, 1)), cost, len(ce.gaps))
		}
	}
	renderHolds(&b, r)
	renderPassover(&b, r)
	renderDeadQueue(&b, r)
	return b.String()
}

// missing is the rest of a row (cols cells) for a contender that is not
// built or a cell that failed or has no repetition, or "".
func (r *results) missing(c contender, ce *cell, cols int) string {
	var why string
	switch {
	case r.notBuilt[c.key]:
		why = "not built yet (internal/lockbench/fair.go)"
	case ce == nil:
		why = "not run"
	case ce.err != nil:
		why = "**error**: " + strings.ReplaceAll(ce.err.Error(), "|", "\\|")
	case len(ce.orders)+len(ce.costs)+len(ce.tps)+len(ce.gaps)+len(ce.holds)+len(ce.passovers)+len(ce.deadQueues) == 0:
		why = "no repetition"
	default:
		return ""
	}
	return why + strings.Repeat(" |", cols) + "\n"
}

// quantile is the nearest-rank quantile of ds (q = 1: the maximum), or 0
// for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(x float64, prec int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// withRange is "median (min–max)", or the median alone for one repetition
// or when all are equal.
func withRange(xs []float64, prec int) string {
	m := num(median(xs), prec)
	if len(xs) < 2 {
		return m
	}
	lo, hi := num(slices.Min(xs), prec), num(slices.Max(xs), prec)
	if lo == hi {
		return m
	}
	return fmt.Sprintf("%s (%s–%s)", m, lo, hi)
}

// dur is a duration in ms below 1 s, in s above.
func dur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch a := math.Abs(ms); {
	case a < 10:
		return fmt.Sprintf("%.1f ms", ms)
	case a < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	}
	return fmt.Sprintf("%.2f s", ms/1000)
}

// fairCostFormula is the fair Mutex's requests per second with w waiters
// behind a holder, default options, the holder's renewals included (the
// formula in docs/design/fair-locks.md, "What waiting costs").
func fairCostFormula(w int) float64 {
	// head: the first in line behind a hold over 50 s old (issue 35,
	// timing.HeadCap).
	const head, poll, renew, relist = 2.0, 1.0, 5.0, 30.0
	x := 1/(0.95*head) + 1/relist // the first in line (its jitter shortens its wait by 0.1 on average), and its listings
	if w >= 2 {
		x += 1 / (2 * poll)
	}
	for p := 2; p <= min(w-1, 10); p++ {
		x += 1 / (15 * float64(p) * poll)
	}
	x += float64(max(w-11, 0)) / (150 * poll)
	return x + 1/(0.95*renew) // renewals come up to 10 % early
}
