//go:build linux

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// uiURL waits for 'azlease ui' to print its URL, the first line of its
// output.
func uiURL(t *testing.T, p *proc) string {
	t.Helper()
	waitLine(t, p.outPath, "http://", 30*time.Second)
	return strings.TrimSpace(lines(t, p.outPath)[0])
}

// uiFetch GETs url within 10 s and returns the status and body.
func uiFetch(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestUICommand: 'azlease ui' against the emulator and Azurite serves the
// JSON of a container in which 'azlease lead', 'azlease shards' and 'azlease
// once' ran: the leader and then, after it stops, the new one; the shard
// group with every shard once; the once-key's recorded failure; and ends
// with status 0 on SIGTERM.
func TestUICommand(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		w.run(30*time.Second, "once", "--identity", "migrator", "--max-attempts", "1", "migrate", "--",
			"sh", "-c", "echo no such table >&2; exit 3").expect(3, 10*time.Second)
		first := w.az("lead", "--identity", "first", "--poll-interval", "200ms", "sched", "--", "sleep", "600")
		second := w.az("lead", "--identity", "second", "--poll-interval", "200ms", "sched", "--", "sleep", "600")
		for _, id := range []string{"rep-a", "rep-b"} {
			w.az("shards", "--identity", id, "orders", "--count", "4", "--", "sleep", "600")
		}
		ui := w.az("ui", "--addr", "127.0.0.1:0", "--refresh", "1s")
		base := uiURL(t, ui)

		overview := func() uiOverview {
			code, body := uiFetch(t, base+"api/overview")
			require.Equal(t, http.StatusOK, code, body)
			var ov uiOverview
			require.NoError(t, json.Unmarshal([]byte(body), &ov), body)
			return ov
		}
		find := func(ov uiOverview, kind, name string) *uiItem {
			for _, it := range ov.Items {
				if it.Kind == kind && it.Name == name {
					return &it
				}
			}
			return nil
		}
		var leader string
		waitFor(t, 30*time.Second, func() bool {
			ov := overview()
			l, g := find(ov, kindLeader, "sched"), find(ov, kindGroup, "orders")
			if l == nil || l.State != stateLeased || g == nil || !g.Group.Balanced || g.Group.Owned != 4 {
				return false
			}
			leader = l.Holder
			return true
		})
		require.Contains(t, []string{"first", "second"}, leader)

		code, body := uiFetch(t, base+"api/items/shard-group/orders")
		require.Equal(t, http.StatusOK, code, body)
		var ia uiItemAnswer
		require.NoError(t, json.Unmarshal([]byte(body), &ia))
		got := map[string]int{}
		for _, s := range ia.Item.Group.Shards {
			got[s.Name]++
			assert.Contains(t, []string{"rep-a", "rep-b"}, s.Owner, "shard %s", s.Name)
		}
		assert.Equal(t, map[string]int{"0": 1, "1": 1, "2": 1, "3": 1}, got)

		code, body = uiFetch(t, base+"api/items/once-key/once/migrate")
		require.Equal(t, http.StatusOK, code, body)
		ia = uiItemAnswer{}
		require.NoError(t, json.Unmarshal([]byte(body), &ia))
		assert.Equal(t, "failed", ia.Item.Once.State)
		assert.Contains(t, ia.Item.Once.LastError, "no such table")

		code, body = uiFetch(t, base+"api/blobs")
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, `"kind": "membership"`)

		// The leader stops; the other leads, and the page says so.
		stopped, next := first, "second"
		if leader == "second" {
			stopped, next = second, "first"
		}
		stopped.signal(syscall.SIGTERM)
		waitFor(t, 30*time.Second, func() bool {
			l := find(overview(), kindLeader, "sched")
			return l != nil && l.Holder == next && l.State == stateLeased
		})
		code, body = uiFetch(t, base+"api/items/leader/sched")
		require.Equal(t, http.StatusOK, code)
		ia = uiItemAnswer{}
		require.NoError(t, json.Unmarshal([]byte(body), &ia))
		require.Len(t, ia.Item.Terms, 2)
		assert.Equal(t, leader, ia.Item.Terms[0].Holder)
		assert.Equal(t, next, ia.Item.Terms[1].Holder)
		assert.Equal(t, "held now", ia.Item.Terms[1].Ended)
		// A planned stop with a standby: handed over, and the time with no
		// leader is the gap between the two.
		assert.Equal(t, "stop", ia.Item.Terms[1].Began)
		assert.Equal(t, "stop", ia.Item.Terms[0].EndedBy)
		assert.True(t, ia.Item.Terms[0].EndExact)
		require.Len(t, ia.Item.Gaps, 1)
		assert.Equal(t, ia.Item.Terms[0].End, ia.Item.Gaps[0].From)
		assert.Equal(t, ia.Item.Terms[1].Start, ia.Item.Gaps[0].To)

		code, body = uiFetch(t, base)
		assert.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, `<script src="/ui/app.js"`)
		ui.signal(syscall.SIGTERM)
		ui.expect(0, 10*time.Second)
	})
}

// TestUICommandSecretsAndRefusal: with a SAS URL, nothing the page or the
// JSON answers carries its signature; a wrong account key is refused at
// start (77), an address in use is a usage error (64), and --help says
// what the page never shows.
func TestUICommandSecretsAndRefusal(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	w.run(30*time.Second, "lock", "--identity", "holder", "jobs", "--", "true").expect(0, 10*time.Second)
	var blobEndpoint string
	for _, kv := range strings.Split(w.conn, ";") {
		if v, ok := strings.CutPrefix(kv, "BlobEndpoint="); ok {
			blobEndpoint = strings.TrimSuffix(v, "/")
		}
	}
	require.NotEmpty(t, blobEndpoint)
	const sig = "c2VjcmV0LXNpZ25hdHVyZQ%3D%3D"
	env := []string{"GORACE=atexit_sleep_ms=0", "PATH=" + os.Getenv("PATH")}
	ui := startProc(t, env, "ui", "--addr", "127.0.0.1:0", "--refresh", "1s",
		"--sas-url", blobEndpoint+"/"+w.container+"?sv=2023-11-03&sp=rl&sig="+sig)
	base := uiURL(t, ui)
	for _, p := range []string{"", "api/overview", "api/blobs", "api/items/mutex/jobs", "items/mutex/jobs"} {
		code, body := uiFetch(t, base+p)
		assert.Equal(t, http.StatusOK, code, p)
		assert.NotContains(t, body, sig, p)
		assert.NotContains(t, body, "c2VjcmV0", p)
		if p == "api/items/mutex/jobs" {
			assert.Contains(t, body, `"holder": "holder"`)
		}
	}
	assert.NotContains(t, ui.stderr(), "c2VjcmV0")

	// Another ui on the same address.
	host := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/")
	again := w.az("ui", "--addr", host)
	again.expect(exitUsage, 30*time.Second)
	assert.Contains(t, oneLine(t, again), "cannot listen on --addr")
	ui.signal(syscall.SIGINT)
	ui.expect(0, 10*time.Second)

	wrong := strings.Replace(w.conn, "AccountKey=", "AccountKey=AAAA", 1)
	bad := startProc(t, append(env, connectionEnv+"="+wrong), "ui", "--addr", "127.0.0.1:0", "--container", w.container)
	bad.expect(exitRefused, 30*time.Second)
	assert.Contains(t, oneLine(t, bad), "storage refused")

	help := w.run(10*time.Second, "ui", "--help")
	assert.Contains(t, strings.Join(strings.Fields(help.stdout()), " "), "never shows keys, SAS tokens or lease IDs")
	assert.Contains(t, help.stdout(), "List Blobs request per 5,000 blobs")
}

// TestUICommandEveryAddress: 'azlease ui --addr 0.0.0.0:0' prints a URL
// that opens the page (the loopback one, not http://[::]:PORT/), says on
// stderr that it listens on every address and names this host's others.
func TestUICommandEveryAddress(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	ui := w.az("ui", "--addr", "0.0.0.0:0", "--refresh", "1s")
	url := uiURL(t, ui)
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+/$`, url)
	code, body := uiFetch(t, url+"api/overview")
	assert.Equal(t, http.StatusOK, code, body)
	waitStderr(t, ui, "listens on every address of this host: "+url+" opens it here", 10*time.Second)
	ui.signal(syscall.SIGTERM)
	ui.expect(0, 10*time.Second)
}

// waitFor polls cond every 100 ms until it holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within %v", limit)
		}
	}
}
