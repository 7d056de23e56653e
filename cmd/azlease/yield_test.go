package main

// How 'azlease yield' reports the move it waited for: from the first term
// after the one asked to yield, as its record says.

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/azlease/azlease"
)

// TestYieldedSaysHow: 'handed over' only for a term that began by the
// yield's hand-over; otherwise how it began, and exit 75 when the old
// leader leads again or another than --to took the lease.
func TestYieldedSaysHow(t *testing.T) {
	for _, tc := range []struct {
		name, to, holder string
		began            azlease.TermChange
		code             int
		out, err         string
	}{
		{"handed over", "b", "b", azlease.ChangeYield, 0, "job: leadership moved from a to b (epoch 2): handed over\n", ""},
		{"released, taken by --to", "b", "b", azlease.ChangeReleased, 0,
			"job: leadership moved from a to b (epoch 2), but not handed over: b took the lease after the previous holder released it\n", ""},
		{"released, taken by another", "b", "c", azlease.ChangeReleased, exitNotAcquired,
			"job: leadership moved from a to c (epoch 2), but not handed over: c took the lease after the previous holder released it\n",
			"yield job: leadership moved to c, not to b"},
		{"released, taken by any", "", "c", azlease.ChangeReleased, 0,
			"job: leadership moved from a to c (epoch 2), but not handed over: c took the lease after the previous holder released it\n", ""},
		{"taken back", "b", "a", azlease.ChangeReleased, exitNotAcquired, "",
			"yield job: leadership did not move: a leads again (epoch 2): the lease was not handed over; a took the lease after the previous holder released it"},
		{"another hand-over", "", "b", azlease.ChangeStop, 0,
			"job: leadership moved from a to b (epoch 2), by another hand-over: handed over: the previous leader stopped (planned succession)\n", ""},
		{"not recorded", "", "b", azlease.ChangeUnknown, 0, "job: leadership moved from a to b (epoch 2)\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			g := &globals{stdout: &out}
			err := g.yielded("yield job", "job", "a", tc.to, azlease.HistoryEntry{Holder: tc.holder, Epoch: 2, Began: tc.began})
			assert.Equal(t, tc.out, out.String())
			if tc.code == 0 {
				assert.NoError(t, err)
				return
			}
			var ee *exitError
			if assert.True(t, errors.As(err, &ee), "%v", err) {
				assert.Equal(t, tc.code, ee.code)
				assert.Equal(t, tc.err, ee.msg)
			}
		})
	}
}
