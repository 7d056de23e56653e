package main

import (
	"bytes"
	"regexp"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestGocronExample runs three replicas' schedulers on the embedded emulator
// for four ticks of a second: every tick ran on exactly one replica.
func TestGocronExample(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	var out bytes.Buffer
	if err := run([]string{"-replicas", "3", "-ticks", "4", "-period", "1s"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	runs := map[string]int{}
	for _, m := range regexp.MustCompile(`tick (\S+): report ran on replica-\d`).FindAllStringSubmatch(out.String(), -1) {
		runs[m[1]]++
	}
	if len(runs) < 3 {
		t.Errorf("%d ticks ran, want at least 3:\n%s", len(runs), out.String())
	}
	for tick, n := range runs {
		if n != 1 {
			t.Errorf("tick %s ran %d times:\n%s", tick, n, out.String())
		}
	}
}
