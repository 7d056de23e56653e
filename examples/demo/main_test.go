package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemo runs `make demo`'s script on the embedded emulator (about 32 s of
// real time) and checks its story: a planned stop, a yield, a priority move
// and a crash, each measured and told as the record says it (how the term
// began), with expectations from the options used and none of the
// release-and-poll story the demo used to tell; no two leaders at once.
func TestDemo(t *testing.T) {
	t.Parallel()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: the demo takes about 32 s")
	}
	var out bytes.Buffer
	if err := run([]string{"-connection-string", "", "-electors", "3"}, &out); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"planned stop: took", "began: stop;",
		"yield: took", "began: yield;",
		"priority: took", "began: priority;",
		"crash: took", "began: expired;", "lost leadership",
		"no leader for", "at no sampled instant did two electors believe they led",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "expect up to one poll interval") {
		t.Errorf("the demo tells the release-and-poll story, not the planned hand-off the README leads with:\n%s", text)
	}
	if n := strings.Count(text, "\n    epoch "); n < 5 {
		t.Errorf("the history lists %d terms, want at least 5:\n%s", n, text)
	}
	t.Log("\n" + text)
}
