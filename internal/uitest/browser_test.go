package uitest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/shards"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "azlease-uitest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	azleaseBin, err = buildAzlease(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

// refresh is the ui's --refresh in the test.
const refresh = time.Second

// screenshotDir is where the screenshots go: AZLEASE_UI_SCREENSHOTS (make
// screenshots sets it to docs/), else the test's own temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("AZLEASE_UI_SCREENSHOTS"); d != "" {
		return d
	}
	return t.TempDir()
}

// browser starts headless Chromium with a fresh profile; the context it
// returns drives one tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.DisableGPU, chromedp.NoSandbox, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now. (The first run's context is the browser's
	// life: it takes no timeout; later ones do.)
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	return ctx
}

// run runs browser actions within 20 s.
func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(rctx, steps...))
}

// eval evaluates js in the page, within 20 s, and returns its value.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(rctx, chromedp.Evaluate[T](js))
	require.NoError(t, err, "evaluate %s", js)
	return v
}

// screenshot saves the viewport as a PNG.
func screenshot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(rctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// overviewRow is the leader's row of the overview as the page shows it.
type overviewRow struct {
	State  string `json:"state"` // the page's: ok, storage-unreachable, …
	Reads  int    `json:"reads"` // answers the page has drawn
	Holder string `json:"holder"`
	Lease  string `json:"lease"`
	Rows   int    `json:"rows"`
}

const overviewJS = `(() => {
  const r = document.querySelector('tr[data-path="/items/leader/sched"]');
  return {
    state: document.body.dataset.state,
    reads: Number(document.getElementById("read").dataset.reads || 0),
    holder: r ? r.querySelector("td.holder").textContent : "",
    lease: r ? r.querySelector("td.state").textContent : "",
    rows: document.querySelectorAll("tr.item").length,
  };
})()`

// gridCell is one shard of the grid as the page shows it.
type gridCell struct {
	Shard string `json:"shard"`
	Owner string `json:"owner"` // data-owner
	Label string `json:"label"` // the owner as written in the cell
	Class string `json:"class"`
}

const gridJS = `Array.from(document.querySelectorAll("#grid .shard")).map(e => ({
  shard: e.dataset.shard, owner: e.dataset.owner, label: e.querySelector(".owner").textContent, class: e.className,
}))`

// TestBrowser: the page, in headless Chromium, against 'azlease emulator'
// with real 'azlease lead', 'azlease lock' and 'azlease shards' processes.
// The overview shows the leader, then the new leader at the first read
// after the leader stopped; the leader's page draws both terms; a mutex's
// page shows the lock commands waiting for it, in order; a shard group's grid shows
// every shard exactly once, labelled with its owner, and changes when a
// replica joins; while storage, or the ui itself, does not answer the page
// says so and shows no data, and shows it again when it answers.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	shots := screenshotDir(t)

	emu, az, cc, leader := emulatorWorld(t)

	web1 := az("lead", "--identity", "web-1", "--poll-interval", "300ms", "sched", "--", "sleep", "600")
	waitFor(t, 30*time.Second, "web-1 leads", func() bool { st := leader(); return st.Leased && st.Holder == "web-1" })
	web2 := az("lead", "--identity", "web-2", "--poll-interval", "300ms", "sched", "--", "sleep", "600")
	ui := az("ui", "--addr", "127.0.0.1:0", "--refresh", refresh.String())
	base := strings.TrimSuffix(ui.firstLine("http://", 30*time.Second), "/")

	// The overview shows the leader.
	run(t, ctx, chromedp.Navigate(base+"/"))
	var row overviewRow
	waitFor(t, 20*time.Second, "the overview shows web-1 leading", func() bool {
		row = eval[overviewRow](t, ctx, overviewJS)
		return row.State == "ok" && row.Holder == "web-1" && strings.Contains(row.Lease, "leased")
	})

	// The leader stops; web-2 takes over. The page shows it at its first
	// read that began after storage did (two reads at most: one may have
	// been under way), and within a refresh and a second or so.
	web1.stop(20 * time.Second)
	waitFor(t, 30*time.Second, "web-2 leads", func() bool { st := leader(); return st.Leased && st.Holder == "web-2" })
	tookOver := time.Now()
	readsThen := eval[overviewRow](t, ctx, overviewJS).Reads
	waitFor(t, 2*refresh+5*time.Second, "the overview shows web-2 leading", func() bool {
		row = eval[overviewRow](t, ctx, overviewJS)
		return row.Holder == "web-2" && strings.Contains(row.Lease, "leased")
	})
	shownAfter := time.Since(tookOver)
	assert.LessOrEqual(t, row.Reads, readsThen+2, "shown by the first read that began after the take-over")
	t.Logf("web-2 shown %v after it led (refresh %v), %d reads later", shownAfter.Round(time.Millisecond), refresh, row.Reads-readsThen)

	// A third term, for the timeline: web-3 takes over from web-2.
	web3 := az("lead", "--identity", "web-3", "--poll-interval", "300ms", "sched", "--", "sleep", "600")
	time.Sleep(2 * time.Second)
	web2.stop(20 * time.Second)
	waitFor(t, 30*time.Second, "web-3 leads", func() bool { st := leader(); return st.Leased && st.Holder == "web-3" })

	// The leader's page: a bar per term, in a lane per holder, labelled
	// with how it began; a lane of the times with no holder.
	run(t, ctx, chromedp.Navigate(base+"/items/leader/sched"))
	type bar struct {
		Holder string `json:"holder"`
		Epoch  string `json:"epoch"`
		Text   string `json:"text"`
		Label  string `json:"label"`
		Short  string `json:"short"`
		Began  string `json:"began"`
		Title  string `json:"title"`
		Fits   bool   `json:"fits"`
	}
	var bars []bar
	waitFor(t, 20*time.Second, "the timeline draws three terms", func() bool {
		bars = eval[[]bar](t, ctx, `Array.from(document.querySelectorAll("#timeline .bar[data-label]")).map(e => ({holder: e.dataset.holder,
		  epoch: e.dataset.epoch, text: e.textContent, label: e.dataset.label, short: e.dataset.short, began: e.dataset.began,
		  title: e.title, fits: e.scrollWidth <= e.clientWidth}))`)
		return len(bars) == 3
	})
	var holders, began []string
	for _, b := range bars {
		holders = append(holders, b.Holder)
		began = append(began, b.Began)
		// A label too long for its bar is shortened (to how the term
		// began, or to nothing: the title says all), never cut to "we".
		assert.True(t, b.Fits, "the label of %s's bar fits it: %q", b.Holder, b.Text)
		assert.Contains(t, []string{b.Label, b.Short, ""}, b.Text, "a whole label, the epoch, or nothing")
		assert.Contains(t, b.Title, b.Holder)
		if b.Text == b.Label {
			assert.Contains(t, b.Text, b.Holder, "each bar is labelled with its holder")
		}
	}
	assert.Equal(t, []string{"web-1", "web-2", "web-3"}, holders)
	assert.Equal(t, []string{"free", "stop", "stop"}, began, "how each term began: a free lease, then planned stops")
	assert.Equal(t, "web-3", eval[string](t, ctx, `document.querySelector("#facts .holder").textContent`))
	assert.Equal(t, 2, eval[int](t, ctx, `document.querySelectorAll("#gaps .gap").length`), "the two hand-overs' times without a leader")
	assert.Equal(t, []string{"", "stop", "stop"}, eval[[]string](t, ctx, `Array.from(document.querySelectorAll("#terms tbody td.ended")).map(e => e.dataset.endedBy)`),
		"newest first: web-3 holds it, the others ended by a planned stop")
	screenshot(t, ctx, filepath.Join(shots, "ui-leader.png"))

	// A run-once of 3 s: named by its key, in the page and its URL, and
	// it lasted 3 s (recorded), however long ago.
	once := az("once", "--identity", "migrator", "quick", "--", "sleep", "3")
	select {
	case <-once.done:
		require.Zero(t, once.cmd.ProcessState.ExitCode(), once.stderr())
	case <-time.After(30 * time.Second):
		t.Fatal("azlease once did not finish")
	}
	run(t, ctx, chromedp.Navigate(base+"/"))
	waitFor(t, 20*time.Second, "the overview lists the once-key by its key", func() bool {
		return eval[string](t, ctx, `(document.querySelector('tr[data-path="/items/once-key/quick"] td.name') || {}).textContent || ""`) == "quick"
	})
	run(t, ctx, chromedp.Navigate(base+"/items/once-key/quick"))
	waitFor(t, 20*time.Second, "the once-key's page", func() bool {
		return eval[string](t, ctx, `(document.getElementById("item-name") || {}).textContent || ""`) == "quick"
	})
	time.Sleep(2 * refresh)
	lasted := eval[string](t, ctx, `document.querySelector("#terms tbody td.lasted").textContent`)
	assert.Regexp(t, `^3\.\d s$`, lasted, "a 3 s run-once lasted 3 s")

	// A fair lock's queue: two 'azlease lock' waiters behind a holder are
	// the mutex's queue on its page, first in line first, and never items
	// of their own on the overview.
	holder := az("lock", "--identity", "holder", "jobs", "--", "sleep", "600")
	waitFor(t, 30*time.Second, "the holder holds jobs", func() bool {
		st, err := azlease.Inspect(context.Background(), cc, "jobs")
		require.NoError(t, err)
		return st.Leased
	})
	var lockWaiters []*proc
	for _, id := range []string{"waiter-1", "waiter-2"} {
		lockWaiters = append(lockWaiters, az("lock", "--identity", id, "jobs", "--", "true"))
		waitFor(t, 30*time.Second, id+" queued", func() bool {
			q, err := azlease.InspectQueue(context.Background(), cc, "jobs")
			require.NoError(t, err)
			return len(q) == len(lockWaiters)
		})
	}
	run(t, ctx, chromedp.Navigate(base+"/items/mutex/jobs"))
	type queueRow struct {
		Waiter string `json:"waiter"`
		State  string `json:"state"`
	}
	var rows []queueRow
	waitFor(t, 20*time.Second, "the mutex's page shows its queue", func() bool {
		rows = eval[[]queueRow](t, ctx, `Array.from(document.querySelectorAll("#queue tbody tr")).map(e => ({waiter: e.dataset.waiter, state: e.lastChild.dataset.state}))`)
		return len(rows) == 2
	})
	assert.Equal(t, []queueRow{{"waiter-1", "first in line"}, {"waiter-2", "waiting"}}, rows)
	heads := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("#queue thead th")).map(e => e.textContent)`)
	assert.Equal(t, []string{"#", "waiter", "waiting since", ""}, heads, "the queue's headers, the last one empty (not [object Object])")
	run(t, ctx, chromedp.Navigate(base+"/"))
	waitFor(t, 20*time.Second, "the overview", func() bool { return eval[overviewRow](t, ctx, overviewJS).Rows > 0 })
	assert.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll('tr.item[data-path*="/queue"]').length`), "no item of a queue's blob")
	assert.Contains(t, eval[string](t, ctx, `document.querySelector('tr[data-path="/items/mutex/jobs"] td.summary').textContent`),
		"· 2 waiting", "the overview counts the queue (none missed)")
	holder.stop(20 * time.Second)
	for _, p := range lockWaiters {
		p.stop(30 * time.Second)
	}

	// A group no replica has taken a shard of yet (a membership blob
	// without a member's record: no live member, no shard): the API leaves
	// out the empty lists, and the page shows the group anyway and goes on
	// reading. Before this was checked the page
	// stopped at its first such read, and CI failed when the replicas below
	// were slow to take their shards.
	early, err := azlease.NewLease(cc, "orders/members/early", nil)
	require.NoError(t, err)
	_, err = early.Acquire(context.Background())
	require.NoError(t, err)
	run(t, ctx, chromedp.Navigate(base+"/items/shard-group/orders"))
	pageState := func() string { return eval[string](t, ctx, `document.body.dataset.state || ""`) }
	waitFor(t, 20*time.Second, "the group's page shows a group without shards", func() bool {
		return pageState() == "ok" && eval[int](t, ctx, `document.querySelectorAll("#group-state").length`) == 1 &&
			eval[int](t, ctx, `document.querySelectorAll("#grid .shard").length`) == 0
	})
	readsThen = eval[overviewRow](t, ctx, overviewJS).Reads
	waitFor(t, 3*refresh+5*time.Second, "the group's page reads again", func() bool {
		return eval[overviewRow](t, ctx, overviewJS).Reads >= readsThen+2
	})
	assert.Equal(t, "ok", pageState())
	require.NoError(t, early.Release(context.Background()))
	_, err = cc.NewBlobClient("orders/members/early").Delete(context.Background(), nil)
	require.NoError(t, err)

	// A shard group of two replicas on 12 shards.
	names := shards.Numbered(12)
	replica := func(id string) *proc {
		return az("shards", "--identity", id, "--poll-interval", "500ms", "orders", "--count", "12", "--", "sleep", "600")
	}
	workers := []*proc{replica("worker-a"), replica("worker-b")}
	run(t, ctx, chromedp.Navigate(base+"/items/shard-group/orders"))
	grid := func() []gridCell { return eval[[]gridCell](t, ctx, gridJS) }
	// every shard exactly once, labelled with an owner among members; the
	// owners' counts.
	check := func(cells []gridCell, members ...string) map[string]int {
		t.Helper()
		var got []string
		counts := map[string]int{}
		for _, c := range cells {
			got = append(got, c.Shard)
			if c.Owner != "" {
				assert.Contains(t, members, c.Owner, "shard %s", c.Shard)
				assert.Equal(t, c.Owner, c.Label, "shard %s: the cell names its owner", c.Shard)
				counts[c.Owner]++
			}
		}
		slices.Sort(got)
		want := slices.Clone(names)
		slices.Sort(want)
		assert.Equal(t, want, got, "every shard exactly once")
		return counts
	}
	balanced := func(n int) func() bool {
		return func() bool {
			cells := grid()
			if len(cells) != len(names) {
				return false
			}
			counts := map[string]int{}
			for _, c := range cells {
				if c.Owner == "" || strings.Contains(c.Class, "misplaced") {
					return false
				}
				counts[c.Owner]++
			}
			if len(counts) != n {
				return false
			}
			for _, k := range counts {
				if k != len(names)/n {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, 40*time.Second, "the grid shows 12 shards over two replicas", balanced(2))
	before := grid()
	assert.Equal(t, map[string]int{"worker-a": 6, "worker-b": 6}, check(before, "worker-a", "worker-b"))

	// A third replica joins: the grid changes, each shard still once.
	workers = append(workers, replica("worker-c"))
	waitFor(t, 60*time.Second, "the grid shows worker-c's shards", balanced(3))
	after := grid()
	assert.Equal(t, map[string]int{"worker-a": 4, "worker-b": 4, "worker-c": 4}, check(after, "worker-a", "worker-b", "worker-c"))
	assert.NotEqual(t, before, after)
	// What the page shows is what storage says.
	a, err := shards.Inspect(context.Background(), cc, "orders", nil)
	require.NoError(t, err)
	for _, s := range a.Shards {
		i := slices.IndexFunc(after, func(c gridCell) bool { return c.Shard == s.Name })
		require.GreaterOrEqual(t, i, 0, s.Name)
		assert.Equal(t, s.Owner, after[i].Owner, "shard %s", s.Name)
	}
	assert.Equal(t, "3", eval[string](t, ctx, `String(document.querySelectorAll("#members tbody tr").length)`))
	assert.Equal(t, "None.", eval[string](t, ctx, `document.getElementById("misplaced").textContent`))
	screenshot(t, ctx, filepath.Join(shots, "ui-shards.png"))

	// Storage hangs: the page says so and shows no data; then it answers
	// again.
	for _, p := range append(workers, web3) {
		p.stop(30 * time.Second)
	}
	run(t, ctx, chromedp.Navigate(base+"/"))
	waitFor(t, 20*time.Second, "the overview", func() bool { return eval[overviewRow](t, ctx, overviewJS).Rows > 0 })
	require.NoError(t, emu.cmd.Process.Signal(syscall.SIGSTOP))
	waitFor(t, 30*time.Second, "the page says storage cannot be reached", func() bool {
		row = eval[overviewRow](t, ctx, overviewJS)
		return row.State == "storage-unreachable"
	})
	assert.Zero(t, row.Rows, "no rows from an older read")
	problem := eval[string](t, ctx, `document.getElementById("problem").textContent`)
	assert.Contains(t, problem, "Storage cannot be reached")
	assert.Contains(t, problem, "No data is shown")
	require.NoError(t, emu.cmd.Process.Signal(syscall.SIGCONT))
	waitFor(t, 30*time.Second, "the overview again", func() bool {
		row = eval[overviewRow](t, ctx, overviewJS)
		return row.State == "ok" && row.Rows > 0
	})

	// The ui itself hangs: the page takes its data away.
	require.NoError(t, ui.cmd.Process.Signal(syscall.SIGSTOP))
	waitFor(t, refresh+20*time.Second, "the page says nothing answers", func() bool {
		row = eval[overviewRow](t, ctx, overviewJS)
		return row.State == "waiting"
	})
	assert.Zero(t, row.Rows, "no rows from an older read")
	require.NoError(t, ui.cmd.Process.Signal(syscall.SIGCONT))
	waitFor(t, 30*time.Second, "the overview again", func() bool {
		row = eval[overviewRow](t, ctx, overviewJS)
		return row.State == "ok" && row.Rows > 0
	})
	ui.stop(10 * time.Second)
	assert.Equal(t, 0, ui.cmd.ProcessState.ExitCode(), ui.stderr())
}

// emulatorWorld starts an 'azlease emulator' and returns it, how to run an
// azlease command against it (in the container uitest), a client of that
// container, and a reader of the lock "sched"'s status.
func emulatorWorld(t *testing.T) (emu *proc, az func(args ...string) *proc, cc *container.Client, leader func() azlease.Status) {
	t.Helper()
	emu = start(t, os.Environ(), "emulator", "--addr", "127.0.0.1:0")
	conn := emu.firstLine("BlobEndpoint=", 30*time.Second)
	const ctr = "uitest"
	env := environ(conn)
	az = func(args ...string) *proc {
		return start(t, env, append([]string{args[0], "--container", ctr}, args[1:]...)...)
	}
	cc, err := azlease.ContainerClientFromConnectionString(conn, ctr, nil)
	require.NoError(t, err)
	leader = func() azlease.Status {
		st, err := azlease.Inspect(context.Background(), cc, "sched")
		require.NoError(t, err)
		return st
	}
	return emu, az, cc, leader
}
