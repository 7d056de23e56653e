package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestShardsExample runs the whole timeline (about 25 s of real time) and
// checks that each event balanced with the fewest moves.
func TestShardsExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"cold start: balanced", "d joined: balanced", "b crashed: balanced", "c stopped: balanced", "checked: no shard ever ran on two replicas at once"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "changed hands") {
			var moved, least int
			i := strings.Index(l, "; ")
			if _, err := fmtSscanf(l[i+2:], &moved, &least); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			if moved != least {
				t.Errorf("more moves than needed: %q", l)
			}
		}
	}
}

func fmtSscanf(s string, moved, least *int) (int, error) {
	return fmt.Sscanf(s, "%d shards changed hands (the fewest possible: %d)", moved, least)
}
