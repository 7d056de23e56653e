package uitest

// The browser test of an election's candidates on the leader's page: the
// standby marked, a killed one shown gone (and never as standby) within a
// lease duration and a read.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// candidateRow is one row of the page's candidates table.
type candidateRow struct {
	Identity string `json:"identity"`
	State    string `json:"state"` // data-state: ready, not-ready, stopping, gone
	Role     string `json:"role"`  // data-role: standby, designated, successor or ""
	Text     string `json:"text"`  // the state cell as written
	RoleText string `json:"roleText"`
}

const candidatesJS = `Array.from(document.querySelectorAll("#candidates tbody tr")).map(e => ({
  identity: e.dataset.candidate, state: e.dataset.state, role: e.dataset.role,
  text: e.querySelector("td.cstate").textContent, roleText: e.querySelector("td.role").textContent,
}))`

// leaseDuration is the lease duration of the leaders below: the default,
// and the time to live of their candidacies.
const leaseDuration = 15 * time.Second

// TestBrowserCandidates: three 'azlease lead' processes; the leader's page
// marks the best follower as standby (in its table and its facts) and
// nobody else. The standby is SIGKILLed: within a lease duration, the
// second storage's clock counts in, and two reads of the page, the page
// says it is gone with when it was last seen, and never marks it standby
// again; the leader makes the other follower its standby. (Before, the
// page said "not ready" for a gone candidate and showed no standby.)
func TestBrowserCandidates(t *testing.T) {
	ctx := browser(t)
	shots := screenshotDir(t)

	_, az, _, leader := emulatorWorld(t)
	lead := func(id, priority string) *proc {
		return az("lead", "--identity", id, "--priority", priority, "--poll-interval", "300ms", "sched", "--", "sleep", "600")
	}

	// The leader has the highest priority, so that nobody takes over
	// from it for priority during the test; web-2 ranks above web-3.
	lead("web-1", "10")
	waitFor(t, 30*time.Second, "web-1 leads", func() bool { st := leader(); return st.Leased && st.Holder == "web-1" })
	web2 := lead("web-2", "5")
	lead("web-3", "1")
	waitFor(t, 30*time.Second, "web-1 makes web-2 its standby", func() bool { return leader().Standby == "web-2" })
	ui := az("ui", "--addr", "127.0.0.1:0", "--refresh", refresh.String())
	base := strings.TrimSuffix(ui.firstLine("http://", 30*time.Second), "/")

	run(t, ctx, chromedp.Navigate(base+"/items/leader/sched"))
	rows := func() []candidateRow { return eval[[]candidateRow](t, ctx, candidatesJS) }
	row := func(rs []candidateRow, id string) candidateRow {
		for _, r := range rs {
			if r.Identity == id {
				return r
			}
		}
		return candidateRow{}
	}
	// marked is the candidates the page marks (standby or successor).
	marked := func(rs []candidateRow) []string {
		var out []string
		for _, r := range rs {
			if r.Role != "" {
				out = append(out, r.Identity)
			}
		}
		return out
	}
	var rs []candidateRow
	waitFor(t, 20*time.Second, "the page marks web-2 standby", func() bool {
		rs = rows()
		return len(rs) == 3 && row(rs, "web-2").Role == "standby"
	})
	assert.Equal(t, []string{"web-2"}, marked(rs), "one candidate marked")
	assert.Equal(t, "standby", row(rs, "web-2").RoleText)
	assert.Equal(t, "leader", row(rs, "web-1").RoleText, "the leader's own candidacy says it leads")
	for _, r := range rs {
		assert.Equal(t, "ready", r.State, r.Identity)
		assert.Equal(t, "ready", r.Text, r.Identity)
	}
	assert.Equal(t, "web-2", eval[string](t, ctx, `document.querySelector("#facts dd.standby").textContent`), "the facts name the standby")

	// The standby crashes.
	require.NoError(t, web2.cmd.Process.Kill())
	killed := time.Now()
	<-web2.done
	limit := leaseDuration + time.Second + 2*refresh
	waitFor(t, limit+10*time.Second, "the page says web-2 is gone", func() bool {
		rs = rows()
		r := row(rs, "web-2")
		// Never a standby while not yet shown gone either: the leader
		// keeps it standby until its candidacy is gone.
		return r.State == "gone"
	})
	shown := time.Since(killed)
	t.Logf("web-2 shown gone %v after its SIGKILL (lease duration %v, refresh %v)", shown.Round(time.Millisecond), leaseDuration, refresh)
	assert.LessOrEqual(t, shown, limit+2*time.Second, "gone within a lease duration, storage's second and two reads (2 s of slack for a loaded machine)")
	r := row(rs, "web-2")
	assert.Regexp(t, `^gone \(last seen \d+ s ago\)$`, r.Text)
	assert.Empty(t, r.Role, "a gone candidate is never marked standby")
	assert.LessOrEqual(t, len(marked(rs)), 1, "at most one candidate marked")

	// The leader makes web-3 its standby at its next listing.
	waitFor(t, 10*time.Second, "the page marks web-3 standby", func() bool {
		rs = rows()
		return row(rs, "web-3").Role == "standby"
	})
	assert.Equal(t, []string{"web-3"}, marked(rs))
	assert.Equal(t, "gone", row(rs, "web-2").State)
	assert.Equal(t, []string{"web-1", "web-3", "web-2"}, []string{rs[0].Identity, rs[1].Identity, rs[2].Identity}, "best first, the gone one last")
	assert.Equal(t, "web-3", eval[string](t, ctx, `document.querySelector("#facts dd.standby").textContent`))
	assert.True(t, eval[bool](t, ctx, `getComputedStyle(document.querySelector('#candidates tr[data-candidate="web-2"] td')).textDecorationLine.includes("line-through")`),
		"a gone candidate looks different")
	screenshot(t, ctx, filepath.Join(shots, "ui-candidates.png"))

	// The overview counts the gone one.
	run(t, ctx, chromedp.Navigate(base+"/"))
	waitFor(t, 20*time.Second, "the overview counts a gone candidate", func() bool {
		return strings.Contains(eval[string](t, ctx, `(document.querySelector('tr[data-path="/items/leader/sched"] td.summary') || {}).textContent || ""`), "3 candidates (1 gone)")
	})
}
