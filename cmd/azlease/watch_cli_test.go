//go:build linux

package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWatchCommand: 'azlease watch' prints the lock's state, then a line per
// change while two 'azlease lock' runs take it one after the other, as text
// and as JSON, and ends with status 0 on SIGINT and SIGTERM.
func TestWatchCommand(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		text := w.az("watch", "--poll-interval", "200ms", "jobs")
		js := w.az("watch", "--json", "--poll-interval", "200ms", "jobs")
		waitLine(t, text.outPath, "jobs free epoch=0", 30*time.Second)
		waitLine(t, js.outPath, `"state":"free"`, 30*time.Second)
		for _, id := range []string{"first", "second"} {
			lock := w.az("lock", "--identity", id, "jobs", "--", "sleep", "1")
			waitLine(t, text.outPath, "jobs leased holder="+id+" ", 20*time.Second)
			lock.expect(0, 20*time.Second)
			// The next lock starts only once both watches saw this one end.
			waitLine(t, text.outPath, "jobs free holder="+id+" ", 10*time.Second)
			waitLine(t, js.outPath, `"state":"free","holder":"`+id+`"`, 10*time.Second)
		}
		text.signal(syscall.SIGINT)
		js.signal(syscall.SIGTERM)
		text.expect(0, 10*time.Second)
		js.expect(0, 10*time.Second)
		assert.Empty(t, text.stderr())
		assert.Empty(t, js.stderr())

		// Exactly one line per change, the same in both forms.
		re := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z jobs (\w+)(?: holder=(\S+))? epoch=(\d+)(?: since=\S+)?(?: began=(\w+))?(?: ended=(\w+) ended_at=\S+)?$`)
		type change struct {
			state, holder, epoch, began, ended string
		}
		var fromText, fromJSON []change
		for _, l := range lines(t, text.outPath) {
			m := re.FindStringSubmatch(l)
			require.NotNil(t, m, "line %q", l)
			fromText = append(fromText, change{m[1], m[2], m[3], m[4], m[5]})
		}
		for _, l := range lines(t, js.outPath) {
			var e watchEvent
			require.NoError(t, json.Unmarshal([]byte(l), &e), "line %q", l)
			require.Equal(t, "jobs", e.Name)
			require.WithinDuration(t, time.Now(), e.Time, time.Minute)
			if e.State == watchLeased {
				require.NotNil(t, e.Since, "line %q", l)
			}
			if e.EndedBy != "" {
				require.NotNil(t, e.Ended, "a release's instant: line %q", l)
			}
			fromJSON = append(fromJSON, change{e.State, e.Holder, jsonNumber(e.Epoch), e.Began, e.EndedBy})
		}
		require.Len(t, fromText, 5, "lines:\n%s", text.stdout())
		e1, e2 := fromText[1].epoch, fromText[3].epoch
		// How each term began and ended: the first took a free lease, the
		// second the first's released one; each ended by a release.
		assert.Equal(t, []change{
			{"free", "", "0", "", ""}, {"leased", "first", e1, "free", ""}, {"free", "first", e1, "free", "released"},
			{"leased", "second", e2, "released", ""}, {"free", "second", e2, "released", "released"},
		}, fromText)
		assert.Less(t, lastNumber(t, e1), lastNumber(t, e2), "the second term has the higher epoch")
		assert.Equal(t, fromText, fromJSON)
	})
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// TestWatchErrors: a watch whose first read fails exits as the other
// commands do; a bad --poll-interval or -n is a usage error.
func TestWatchErrors(t *testing.T) {
	t.Parallel()
	good := emulatorConn(t)
	key := keyOf(good)
	bad := &world{t: t, conn: strings.Replace(good, key, "QUJD"+key[4:], 1), container: "watch", dir: t.TempDir()}
	p := bad.run(30*time.Second, "watch", "jobs")
	assert.Equal(t, exitRefused, p.status(), "stderr: %s", p.stderr())
	assert.Contains(t, oneLine(t, p), "watch jobs: storage refused the request")

	w := &world{t: t, conn: good, container: "watch", dir: t.TempDir()}
	for _, args := range [][]string{
		{"watch", "--poll-interval", "0s", "jobs"},
		{"watch", "--poll-interval", "2h", "jobs"},
		{"watch", "-n", "0", "jobs"},
		{"watch"},
	} {
		p := w.run(30*time.Second, args...)
		assert.Equal(t, exitUsage, p.status(), "%v: stderr: %s", args, p.stderr())
		oneLine(t, p)
	}
}

// TestWatchStorageOutage: while storage cannot be reached, a watch goes on
// polling with one warning, says once that it reads again when storage is
// back, prints the state it then finds, and ends with 0 on SIGHUP.
func TestWatchStorageOutage(t *testing.T) {
	t.Parallel()
	emu := newWorld(t, "")
	server := emu.az("emulator", "--addr", "127.0.0.1:0")
	conn := connectionOf(t, server)
	addr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(conn)
	w := newWorld(t, conn)
	w.run(20*time.Second, "lock", "--identity", "before", "jobs", "--", "true").expect(0, time.Second)
	watch := w.az("watch", "--poll-interval", "200ms", "jobs")
	waitLine(t, watch.outPath, "jobs free holder=before ", 20*time.Second)

	server.signal(syscall.SIGTERM)
	server.expect(0, 10*time.Second)
	waitStderr(t, watch, "cannot read the lock's status", 30*time.Second)
	time.Sleep(time.Second) // a few more failing polls: no more lines
	// The emulator keeps nothing: the lock is new again when it is back.
	server = emu.az("emulator", "--addr", addr)
	connectionOf(t, server)
	waitStderr(t, watch, "reading the lock's status again", 30*time.Second)
	waitLine(t, watch.outPath, "jobs free epoch=0", 10*time.Second)
	watch.signal(syscall.SIGHUP)
	watch.expect(0, 10*time.Second)
	assert.Equal(t, 2, strings.Count(watch.stderr(), "\n"), "one warning each way:\n%s", watch.stderr())
	assert.Equal(t, 2, strings.Count(watch.stderr(), "level=WARN"), "stderr:\n%s", watch.stderr())
	assert.Len(t, lines(t, watch.outPath), 2, "stdout:\n%s", watch.stdout())
}

// connectionOf waits up to 20 s for 'azlease emulator' to print its
// connection string.
func connectionOf(t *testing.T, p *proc) string {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if first, _, ok := strings.Cut(p.stdout(), "\n"); ok {
			require.Contains(t, first, "BlobEndpoint=http://127.0.0.1:")
			return first
		}
	}
	t.Fatalf("azlease emulator printed no connection string within 20 s; stderr:\n%s", p.stderr())
	return ""
}
