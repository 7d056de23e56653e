package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/azlease/azlease/internal/hostinfo"
)

// report writes the table: one row per N, transport and variant, medians
// over the repetitions with their range where it matters.
func report(b *strings.Builder, cfg runConfig, cells []cell, machine string) {
	if cfg.heading != "" {
		// A further table of the same benchmark: the first one explains it.
		fmt.Fprintf(b, "## %s\n\n", cfg.heading)
		fmt.Fprintf(b, "The same measurement as in \"Holding many leases\", with %v leases renewed every %v, %v of settling, a %v window and\n", cfg.lease, cfg.renew, cfg.settle, cfg.window)
		fmt.Fprintf(b, "%d repetition(s).\n\n", cfg.reps)
		b.WriteString(machine)
		writeTable(b, cfg, cells)
		return
	}
	fmt.Fprintf(b, "## Holding many leases\n\n")
	fmt.Fprintf(b, "N leases held at once on one container client, %v leases renewed every %v, against the emulator served on\n", cfg.lease, cfg.renew)
	fmt.Fprintf(b, "loopback by a separate process (plain HTTP, or TLS with a self-signed ECDSA certificate, HTTP/1.1 as Blob Storage\n")
	fmt.Fprintf(b, "speaks), so only the client's CPU is counted. ")
	if cfg.burst {
		fmt.Fprintf(b, "The N leases are taken all at once (%d at a time), so their renewals come in bursts;\n", cfg.parallel)
	} else {
		fmt.Fprintf(b, "The N leases are taken evenly over one renew interval (up to %d at a time), so their\n", cfg.parallel)
		fmt.Fprintf(b, "renewals are spread as in a process that has held them for a while;\n")
	}
	fmt.Fprintf(b, "after %v of settling the client measures a %v window. %d repetition(s); cells run one at a time, variants interleaved.\n\n", cfg.settle, cfg.window, cfg.reps)
	fmt.Fprintf(b, "- **azlease**: N `Mutex` locks (`Lock`) on a client from `azlease.ContainerClientFromConnectionString`, as the README shows (its transport keeps 64 idle connections per host).\n")
	fmt.Fprintf(b, "- **raw azblob**: N `lease.BlobClient`s, each renewed by a goroutine of its own on a ticker, default client options (azcore keeps 10 idle connections per host).\n")
	fmt.Fprintf(b, "- **raw azblob, 64 idle conns**: the same loop on a transport that keeps 64 idle connections per host, like azlease's: the fair baseline.\n")
	fmt.Fprintf(b, "- **bare net/http**: the same loop, renewing with a hand-signed (Shared Key) request on `http.DefaultTransport`: the floor.\n\n")
	fmt.Fprintf(b, "CPU per renewal is the client's user + system CPU time over the window (getrusage) divided by the renewals the\n")
	fmt.Fprintf(b, "server granted in it: median over repetitions, range in parentheses. RSS is VmRSS at the end of the window\n")
	fmt.Fprintf(b, "(median); goroutines are counted then too. New connections are those the server accepted during the window,\n")
	fmt.Fprintf(b, "per minute. A renewal is late when it reaches the server more than the renew interval + 1 s after the lease's\n")
	fmt.Fprintf(b, "previous grant or renewal (all repetitions summed, with the longest gap seen); a renewal after expiry reaches\n")
	fmt.Fprintf(b, "the server a lease duration or more after the previous one: the lease was free in between, and the server\n")
	fmt.Fprintf(b, "granted it again only because nobody else asked (the loops do not notice). A lock is lost when its term ended\n")
	fmt.Fprintf(b, "(azlease) or a renewal failed (the loops); summed over repetitions. Load is the machine's 1-minute load average\n")
	fmt.Fprintf(b, "at the end of each window (lowest–highest): the machine may be shared, and a 10,000-lease cell over TLS can tip\n")
	fmt.Fprintf(b, "from keeping up to falling behind with it.\n\n")
	b.WriteString(machine)
	writeTable(b, cfg, cells)
}

// writeTable writes the table of cells, one row per N, transport and
// variant.
func writeTable(b *strings.Builder, cfg runConfig, cells []cell) {
	fmt.Fprintf(b, "\n| N held | transport | variant | client CPU per renewal | RSS | goroutines | renewals/s | new connections per minute | renewals later than 1 s (longest gap) | renewals after expiry | locks lost | load |\n")
	fmt.Fprintf(b, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	names := map[string]string{variantAzlease: "azlease Mutex", variantRaw: "raw azblob", variantRaw64: "raw azblob, 64 idle conns", variantHTTP: "bare net/http"}
	for _, n := range cfg.ns {
		for _, useTLS := range cfg.tls {
			for _, v := range cfg.variants {
				var ok []cell
				var failed []string
				for _, c := range cells {
					if c.N != n || c.TLS != useTLS || c.Variant != v {
						continue
					}
					if c.Err != "" {
						failed = append(failed, c.Err)
						continue
					}
					ok = append(ok, c)
				}
				fmt.Fprintf(b, "| %s | %s | %s | ", thousands(float64(n)), transportName(useTLS), names[v])
				if len(ok) == 0 && len(failed) == 0 {
					fmt.Fprintf(b, "not measured | | | | | | | | |\n")
					continue
				}
				if len(ok) == 0 {
					fmt.Fprintf(b, "failed: %s | | | | | | | | |\n", oneLine(strings.Join(failed, "; ")))
					continue
				}
				col := func(f func(c cell) float64) []float64 {
					var xs []float64
					for _, c := range ok {
						xs = append(xs, f(c))
					}
					return xs
				}
				cpu := col(func(c cell) float64 { return c.CPU / float64(c.Renewals) * 1e6 })
				rss := col(func(c cell) float64 { return float64(c.RSS) / (1 << 20) })
				gor := col(func(c cell) float64 { return float64(c.Goroutines) })
				rate := col(func(c cell) float64 { return float64(c.Renewals) / c.Window })
				conns := col(func(c cell) float64 { return float64(c.NewConns) / c.Window * 60 })
				var late, lapsed int64
				var gap float64
				lost := 0
				for _, c := range ok {
					late += c.Late
					lapsed += c.Lapsed
					gap = math.Max(gap, c.MaxGap)
					lost += c.Lost
				}
				load := col(func(c cell) float64 { return c.Load1 })
				lo, hi := slicesMinMax(load)
				loads := fmt.Sprintf("%.1f–%.1f", lo, hi)
				if lo == hi {
					loads = fmt.Sprintf("%.1f", lo)
				}
				fmt.Fprintf(b, "%s µs | %s MB | %s | %s | %s | %s (%.1f s) | %s | %s | %s |",
					withRange(cpu), withRange(rss), thousands(median(gor)), thousands(median(rate)),
					withRange(conns), thousands(float64(late)), gap/1000, thousands(float64(lapsed)), thousands(float64(lost)), loads)
				if len(failed) > 0 {
					fmt.Fprintf(b, " %d repetition(s) failed: %s", len(failed), oneLine(strings.Join(failed, "; ")))
				}
				b.WriteString("\n")
			}
		}
	}
}

// machineInfo describes where the run happened: CPU model, cores, Go,
// kernel, date, and the load before the run (the machine may be shared).
func machineInfo(start time.Time) string {
	cpu := hostinfo.CPUModel()
	kernel := "unknown kernel"
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		kernel = strings.TrimSpace(string(out))
	}
	load := "unknown"
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	return fmt.Sprintf("Machine: %s, %d logical CPUs, %s, %s %s/%s; run started %s UTC, load average then %s.\n",
		cpu, runtime.NumCPU(), kernel, runtime.Version(), runtime.GOOS, runtime.GOARCH, start.UTC().Format("2006-01-02 15:04"), load)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// withRange is "median (min–max)", or the value alone for one repetition.
func withRange(xs []float64) string {
	m := thousands(median(xs))
	if len(xs) < 2 {
		return m
	}
	lo, hi := slicesMinMax(xs)
	return fmt.Sprintf("%s (%s–%s)", m, thousands(lo), thousands(hi))
}

func slicesMinMax(xs []float64) (float64, float64) {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// thousands rounds x and writes it with thousands separators.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
