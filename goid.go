package azlease

import (
	"bytes"
	"runtime"
	"strconv"
)

// goroutineID returns the calling goroutine's id, or 0 if it cannot tell.
//
// Go offers no API for this on purpose, and azlease needs it for one thing
// only: to recognise [Elector.Stop] called on the leader task's own
// goroutine, where waiting for the task to return would be waiting for the
// caller itself. The id is read from the first line of the goroutine's stack
// trace, "goroutine 123 [running]:", the well-known technique: that header
// has kept its form since Go 1, and the runtime never gives a new goroutine
// an id that was used before, so an id names one goroutine for the life of
// the process. It costs about a microsecond.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if !ok {
		return 0
	}
	i := bytes.IndexByte(b, ' ')
	if i <= 0 {
		return 0
	}
	id, err := strconv.ParseUint(string(b[:i]), 10, 64)
	if err != nil {
		return 0
	}
	return id
}
