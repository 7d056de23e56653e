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

// TestCronExample runs three replicas' robfig/cron schedules on the embedded
// emulator for three periods: every period's run happened on exactly one
// replica.
func TestCronExample(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	var out bytes.Buffer
	if err := run([]string{"-replicas", "3", "-ticks", "3"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	runs := map[string]int{}
	for _, m := range regexp.MustCompile(`(report/\S+): report ran on replica-\d`).FindAllStringSubmatch(out.String(), -1) {
		runs[m[1]]++
	}
	if len(runs) < 2 {
		t.Errorf("%d periods ran, want at least 2:\n%s", len(runs), out.String())
	}
	for key, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times:\n%s", key, n, out.String())
		}
	}
}
