// This file tests handOffID: the lease ID of one term's hand-off to one
// successor (succession.go).
package azlease

import (
	"fmt"
	"regexp"
	"testing"
)

// TestHandOffIDPerTerm: two terms handing the lease to the same successor
// (the same announced ID) use two lease IDs, neither the announced one, so
// no two terms ever share a lease ID; the successor derives the same one
// from the epoch it reads; every one is a GUID, as Azure requires.
func TestHandOffIDPerTerm(t *testing.T) {
	guid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := newLeaseID(), newLeaseID()
	seen := map[string]string{}
	for _, c := range []struct {
		announced string
		epoch     uint64
	}{{a, 946684800009}, {a, 946684800010}, {b, 946684800009}, {b, 946684800010}, {a, 0}} {
		id := handOffID(c.announced, c.epoch)
		if !guid.MatchString(id) {
			t.Errorf("handOffID(%s, %d) = %q: not a version-4-shaped GUID", c.announced, c.epoch, id)
		}
		if id == a || id == b {
			t.Errorf("handOffID(%s, %d) is an announced ID", c.announced, c.epoch)
		}
		if id != handOffID(c.announced, c.epoch) {
			t.Errorf("handOffID(%s, %d) is not the same on the successor's side", c.announced, c.epoch)
		}
		key := fmt.Sprintf("%s/%d", c.announced, c.epoch)
		if prev, ok := seen[id]; ok {
			t.Errorf("handOffID(%s, %d) = handOffID of %s", c.announced, c.epoch, prev)
		}
		seen[id] = key
	}
}
