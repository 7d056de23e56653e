package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestQuick runs the benchmark's smoke configuration (-quick: 50 leases, a
// 2 s window, each variant over HTTP and TLS) through the real processes,
// and checks only that every cell produced figures and lost nothing: the
// figures themselves are the benchmark's business, not a test's.
func TestQuick(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "manybench")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH to build the benchmark with: %v", err)
	}
	if out, err := exec.Command(gocmd, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	md, raw := filepath.Join(dir, "many.md"), filepath.Join(dir, "raw.json")
	cmd := exec.Command(bin, "-quick", "-out", md, "-raw", raw)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("manybench -quick: %v\n%s", err, out)
	}
	data, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	var cells []cell
	if err := json.Unmarshal(data, &cells); err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(variants); len(cells) != want {
		t.Fatalf("%d cells, want %d (each variant over HTTP and TLS)", len(cells), want)
	}
	for _, c := range cells {
		name := transportName(c.TLS) + " " + c.Variant
		switch {
		case c.Err != "":
			t.Errorf("%s: %s", name, c.Err)
		case c.Renewals <= 0 || c.RSS <= 0 || c.Goroutines <= 0 || c.Window <= 0 || c.CPU < 0:
			t.Errorf("%s: missing figures: %+v", name, c.clientResult)
		case c.Lost != 0:
			t.Errorf("%s: %d of %d leases lost", name, c.Lost, c.N)
		}
	}
	if table, err := os.ReadFile(md); err != nil || len(table) == 0 {
		t.Errorf("no table written: %v", err)
	}
}

// TestReportPartial checks the table written after each cell: cells not yet
// run show as not measured, not as failed.
func TestReportPartial(t *testing.T) {
	cfg := runConfig{ns: []int{10}, tls: []bool{false}, reps: 1, variants: []string{variantAzlease, variantRaw}}
	done := cell{clientResult: clientResult{Variant: variantAzlease, N: 10, Window: 1, CPU: 0.01, Renewals: 100, RSS: 1 << 20, Goroutines: 3}}
	var b strings.Builder
	report(&b, cfg, []cell{done}, "Machine: test.\n")
	got := b.String()
	if !strings.Contains(got, "| 10 | HTTP | azlease Mutex | 100 µs |") {
		t.Errorf("the measured cell is missing:\n%s", got)
	}
	if !strings.Contains(got, "| 10 | HTTP | raw azblob | not measured |") || strings.Contains(got, "failed:") {
		t.Errorf("the cell not yet run should show as not measured:\n%s", got)
	}
}
