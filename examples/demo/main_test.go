package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemo runs `make demo`'s script on the embedded emulator (about 20 s of
// real time) and checks its story: a graceful handoff, a crash failover, no
// two leaders at once.
func TestDemo(t *testing.T) {
	t.Parallel()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: the demo takes about 20 s")
	}
	var out bytes.Buffer
	if err := run([]string{"-connection-string", "", "-electors", "3"}, &out); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{"handoff took", "failover took", "lost leadership", "at no sampled instant did two electors believe they led"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "\n    epoch "); n < 3 {
		t.Errorf("the history lists %d terms, want at least 3:\n%s", n, out.String())
	}
	t.Log("\n" + out.String())
}
