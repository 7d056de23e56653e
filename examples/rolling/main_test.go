package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRolling runs a short rolling deploy of three replicas on the embedded
// emulator (about 10 s of real time) and checks its story: leadership moved
// once, to generation 2.
func TestRolling(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	var out bytes.Buffer
	if err := run([]string{"-replicas", "3", "-poll", "500ms", "-surge-min", "700ms", "-surge-max", "1200ms"}, &out); err != nil {
		t.Fatalf("rolling failed: %v\n%s", err, out.String())
	}
	s := out.String()
	if !regexp.MustCompile(`deploy done: 1 leader change\(s\), \S+ without a leader in all; v2-\d leads`).MatchString(s) {
		t.Errorf("not one change to generation 2:\n%s", s)
	}
	if !strings.Contains(s, "leadership moved from v1-") {
		t.Errorf("no change printed:\n%s", s)
	}
}
