package main

// The data and the HTTP side of 'azlease ui', in process: real holders of
// every kind on the emulator (inside synctest), one listing made into items,
// and the handlers answering from it. The browser test is internal/uitest;
// the command as a process is ui_cli_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// uiWorld is a container with one holder of each kind, and what the test
// needs to stop them.
type uiWorld struct {
	srv      *azleasetest.Server
	leaseIDs []string // every lease ID held or recorded: none may reach the page
	stop     []func()
}

func newUIWorld(t *testing.T) *uiWorld {
	ctx := context.Background()
	w := &uiWorld{srv: azleasetest.NewServer(t, nil)}
	srv := w.srv

	el, err := azlease.NewElector(srv.Client("lead-a"), "sched", &azlease.ElectorOptions{Identity: "lead-a"})
	require.NoError(t, err)
	leading := make(chan string, 1)
	require.NoError(t, el.Start(ctx, func(ctx context.Context, term *azlease.Term) error {
		leading <- term.Token().LeaseID
		<-ctx.Done()
		return nil
	}))
	w.leaseIDs = append(w.leaseIDs, <-leading)
	w.stop = append(w.stop, func() { require.NoError(t, el.Stop(ctx)) })

	m, err := azlease.NewMutex(srv.Client("locker"), "jobs", &azlease.MutexOptions{Identity: "locker"})
	require.NoError(t, err)
	lk, err := m.Lock(ctx)
	require.NoError(t, err)
	w.leaseIDs = append(w.leaseIDs, lk.Token().LeaseID)
	require.NoError(t, lk.Unlock(ctx)) // released cleanly

	sem, err := azlease.NewSemaphore(srv.Client("exporter"), "exports", 3, &azlease.MutexOptions{Identity: "exporter"})
	require.NoError(t, err)
	sl, err := sem.Acquire(ctx)
	require.NoError(t, err)
	w.leaseIDs = append(w.leaseIDs, sl.Token().LeaseID)
	w.stop = append(w.stop, func() { require.NoError(t, sl.Unlock(ctx)) })

	_, err = azlease.DoOnce(ctx, srv.Client("migrator"), "migrate-7", &azlease.DoOnceOptions{Identity: "migrator", MaxAttempts: 1},
		func(context.Context, azlease.Token) error {
			return errors.New("the command exited with status 3; its stderr ended with: no such table")
		})
	require.Error(t, err)

	// A bare Lease that crashed: it expires, not released.
	l, err := azlease.NewLease(srv.Client("crasher"), "cron", &azlease.LeaseOptions{Identity: "crasher"})
	require.NoError(t, err)
	tok, err := l.Acquire(ctx)
	require.NoError(t, err)
	w.leaseIDs = append(w.leaseIDs, tok.LeaseID)
	srv.Partition("crasher", azleasetest.Blackhole)

	// A shard group of two replicas over 6 shards, and a shard leased by
	// a replica that is not a member: misplaced.
	for _, id := range []string{"rep-a", "rep-b"} {
		g, err := shards.New(srv.Client(id), "orders", shards.Numbered(6), &shards.Options{Identity: id})
		require.NoError(t, err)
		require.NoError(t, g.Start(ctx, func(ctx context.Context, s *shards.Shard) error {
			<-ctx.Done()
			return nil
		}))
		w.stop = append(w.stop, func() { require.NoError(t, g.Stop(ctx)) })
	}
	ghost, err := azlease.NewLease(srv.Client("ghost"), "orders/shards/6", &azlease.LeaseOptions{Identity: "ghost", LeaseDuration: time.Minute})
	require.NoError(t, err)
	gt, err := ghost.Acquire(ctx)
	require.NoError(t, err)
	w.leaseIDs = append(w.leaseIDs, gt.LeaseID)
	// Metadata other than azlease's record is never shown: a membership
	// keeps lease IDs there (shardin), as this one does.
	require.NoError(t, ghost.SetMetadata(ctx, map[string]string{"shardin": "0=" + gt.LeaseID, "note": "not-for-the-page"}))
	w.stop = append(w.stop, func() { require.NoError(t, ghost.Release(ctx)) })
	// A group whose replicas all left: a free shard, no member.
	idle, err := azlease.NewLease(srv.Client("gone"), "idle/shards/0", &azlease.LeaseOptions{Identity: "gone"})
	require.NoError(t, err)
	_, err = idle.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, idle.Release(ctx))
	time.Sleep(20 * time.Second) // the group settles; the crashed lease expires
	return w
}

func (w *uiWorld) close() {
	for i := len(w.stop) - 1; i >= 0; i-- {
		w.stop[i]()
	}
	w.srv.Heal("crasher")
}

func itemByName(m *uiModel, name string) uiItem {
	for _, it := range m.items {
		if it.Name == name {
			return it
		}
	}
	return uiItem{}
}

// TestUIModel: one listing of a container with every kind of holder names
// each item's kind, state, holder, epoch and last release; a leader's
// terms; a semaphore slot's place; a once-key's failure with its recorded
// error; a shard group with its members, shares, every shard once, what is
// misplaced (as shards.Inspect counts it) and its moves; and the empty
// queue and candidates every item has.
func TestUIModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newUIWorld(t)
		defer w.close()
		// A run-once of 3 s, read half a minute later: it lasted 3 s (not
		// "32 s or less": the runner records when it released the key).
		_, err := azlease.DoOnce(context.Background(), w.srv.Client("quick"), "quick", &azlease.DoOnceOptions{Identity: "quick"},
			func(context.Context, azlease.Token) error { time.Sleep(3 * time.Second); return nil })
		require.NoError(t, err)
		time.Sleep(30 * time.Second) // within the ghost's minute
		listed, err := azlease.InspectPrefix(context.Background(), w.srv.Client("ui"), "")
		require.NoError(t, err)
		m := buildUIModel(listed)

		var names []string
		for _, it := range m.items {
			names = append(names, it.Kind+" "+it.Name)
			assert.NotNil(t, it.Queue, it.Name)
			assert.NotNil(t, it.Candidates, it.Name)
			assert.Equal(t, it.Path, m.items[m.byPath[it.Path]].Path)
		}
		assert.Equal(t, []string{
			"lock cron", "semaphore-slot " + sl(listed), "shard-group idle", "mutex jobs", "once-key migrate-7", "shard-group orders",
			"once-key quick", "leader sched",
		}, names)

		lead := itemByName(m, "sched")
		assert.Equal(t, "leased", lead.State)
		assert.Equal(t, "lead-a", lead.Holder)
		assert.Empty(t, lead.LastRelease, "held: no release yet")
		require.Len(t, lead.Terms, 1)
		assert.Equal(t, "held now", lead.Terms[0].Ended)
		assert.Equal(t, "free", lead.Terms[0].Began)
		assert.Empty(t, lead.Gaps, "held since its first term")
		assert.Contains(t, lead.Summary, "began: free")
		assert.Equal(t, "/items/leader/sched", lead.Path)
		require.Len(t, lead.Candidates, 1, "the election's candidates")
		assert.Equal(t, "lead-a", lead.Candidates[0].Identity)
		assert.True(t, lead.Candidates[0].Ready)

		jobs := itemByName(m, "jobs")
		assert.Equal(t, "free", jobs.State)
		assert.Equal(t, "clean", jobs.LastRelease)
		assert.Contains(t, jobs.Summary, "released cleanly")
		require.Len(t, jobs.Terms, 1)
		assert.Equal(t, "released", jobs.Terms[0].EndedBy)
		assert.True(t, jobs.Terms[0].EndExact, "the holder recorded when it released")
		require.Len(t, jobs.Gaps, 1)
		assert.Equal(t, uiGap{From: jobs.Terms[0].End, Text: "no holder since " + jobs.Terms[0].End.Format("15:04:05.000")}, jobs.Gaps[0])

		cron := itemByName(m, "cron")
		assert.Equal(t, "expired", cron.State)
		assert.Equal(t, "not clean", cron.LastRelease)
		assert.Equal(t, "its lease expired (before this read; when is not known)", cron.Terms[0].Ended)
		assert.Equal(t, "expired", cron.Terms[0].EndedBy)
		assert.Nil(t, cron.Terms[0].End, "nobody saw when")
		assert.Equal(t, cron.Terms[0].Start, cron.Terms[0].SureUntil, "it may have stopped any time after it began")
		require.Len(t, cron.Gaps, 1)
		assert.True(t, cron.Gaps[0].Uncertain)
		assert.Nil(t, cron.Gaps[0].To)

		slot := itemByName(m, sl(listed))
		require.NotNil(t, slot.Slot)
		assert.Equal(t, "exports", slot.Slot.Semaphore)
		assert.Equal(t, "leased", slot.State)

		quick := itemByName(m, "quick")
		require.Len(t, quick.Terms, 1)
		assert.Equal(t, "3.0 s", quick.Terms[0].Lasted)
		assert.Equal(t, "once/quick", quick.Blob)
		assert.Equal(t, "/items/once-key/quick", quick.Path, "a once-key's page is named by its key")

		once := itemByName(m, "migrate-7")
		require.NotNil(t, once.Once)
		assert.Equal(t, uiOnce{Key: "migrate-7", State: "failed", Holder: "migrator", Attempts: 1, MaxAttempts: 1, Epoch: once.Epoch,
			Time: once.Once.Time, LastError: "the command exited with status 3; its stderr ended with: no such table"}, *once.Once)
		assert.Equal(t, "/items/once-key/migrate-7", once.Path)

		grp := itemByName(m, "orders")
		require.NotNil(t, grp.Group)
		g := grp.Group
		require.Len(t, g.Members, 2)
		assert.Equal(t, 7, g.ShardCount)
		seen := map[string]int{}
		misplaced := 0
		for _, s := range g.Shards {
			seen[s.Name]++
			if s.Misplaced {
				misplaced++
			}
		}
		for _, s := range append(shards.Numbered(6), "6") {
			assert.Equal(t, 1, seen[s], "shard %s once", s)
		}
		want := shards.AssignmentOf("orders", listed, nil)
		assert.Equal(t, want.Misplaced+1, g.Misplaced, "what the plan counts, and the shard outside the members' list")
		assert.Equal(t, g.Misplaced, misplaced, "the grid marks as many shards as it counts")
		assert.False(t, g.Balanced)
		var ghost uiShard
		for _, s := range g.Shards {
			if s.Name == "6" {
				ghost = s
			}
		}
		assert.Equal(t, "ghost", ghost.Owner)
		assert.True(t, ghost.Misplaced, "owned by a replica that is not a member")
		assert.True(t, ghost.Outside, "not in the members' list")
		for _, mb := range g.Members {
			assert.Equal(t, 3, mb.Owns, mb.Name)
		}
		assert.NotEmpty(t, g.Moves)
		assert.Len(t, grp.Blobs, 2+7+2, "memberships, shards, the registry and the published list")
		for _, b := range grp.Blobs {
			if b.Name == "orders/shardset" || strings.HasPrefix(b.Name, "orders/lists/") {
				assert.Equal(t, kindOther, b.Kind, b.Name)
			} else {
				assert.Contains(t, []string{kindMembership, kindShard}, b.Kind, b.Name)
			}
			assert.Equal(t, grp.Path, b.Item)
		}
		succession := 0
		for _, st := range listed {
			if isSuccessionBlob(st) {
				succession++
			}
		}
		assert.Equal(t, 2, succession, "the leader's candidacy, and the yield request blob it created empty")
		assert.Len(t, m.blobs, len(listed)-succession, "every lock blob once")

		// A group with no member: what the replicas would plan is not
		// known (shards.Inspect says why), so nothing is marked.
		idle := itemByName(m, "idle")
		require.NotNil(t, idle.Group)
		assert.False(t, idle.Group.PlanKnown)
		assert.NotEmpty(t, idle.Group.Note)
		assert.Zero(t, idle.Group.Misplaced)
		require.Len(t, idle.Group.Shards, 1)
		assert.Equal(t, "free", idle.Group.Shards[0].State)
		assert.Contains(t, idle.Summary, "plan not known")
	})
}

// TestUIModelCandidates: an election's candidates in the ui's data, from a
// listing of real Electors: the leader's standby marked (and nobody else);
// one cut off (as a crashed instance is, as far as storage can tell) is
// gone, with when it was last seen, not ready, never the standby, and
// listed last, within a lease duration, storage's second and the leader's
// poll; the leader makes the next one its standby.
func TestUIModelCandidates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := azleasetest.NewServer(t, nil)
		var els []*azlease.Elector
		for _, c := range []struct {
			id       string
			priority int
		}{{"lead-a", 10}, {"next-b", 5}, {"last-c", 1}} {
			el, err := azlease.NewElector(srv.Client(c.id), "sched", &azlease.ElectorOptions{Identity: c.id, Priority: c.priority})
			require.NoError(t, err)
			require.NoError(t, el.Start(ctx, func(ctx context.Context, _ *azlease.Term) error { <-ctx.Done(); return nil }))
			els = append(els, el)
			if c.id == "lead-a" {
				for !el.IsLeader() {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}
		defer func() {
			srv.Heal("next-b")
			for _, el := range els {
				require.NoError(t, el.Stop(ctx))
			}
		}()
		candidates := func() []uiCandidate {
			listed, err := azlease.InspectPrefix(ctx, srv.Client("ui"), "")
			require.NoError(t, err)
			return itemByName(buildUIModel(listed), "sched").Candidates
		}
		// marked is who the data marks: standby, or designated successor.
		marked := func(cs []uiCandidate) []string {
			var out []string
			for _, c := range cs {
				if c.Standby || c.Designated {
					out = append(out, c.Identity)
				}
			}
			return out
		}
		ids := func(cs []uiCandidate) []string {
			var out []string
			for _, c := range cs {
				out = append(out, c.Identity)
			}
			return out
		}
		time.Sleep(10 * time.Second) // the leader's listing names its standby
		cs := candidates()
		assert.Equal(t, []string{"lead-a", "next-b", "last-c"}, ids(cs))
		assert.Equal(t, []string{"next-b"}, marked(cs), "the standby, alone")
		for _, c := range cs {
			assert.True(t, c.Ready, c.Identity)
			assert.False(t, c.Gone, c.Identity)
			assert.NotNil(t, c.Refreshed, c.Identity)
		}

		srv.Partition("next-b", azleasetest.Blackhole)
		cut := time.Now()
		var goneAfter time.Duration
		for goneAfter == 0 && time.Since(cut) < time.Minute {
			time.Sleep(100 * time.Millisecond)
			for _, c := range candidates() {
				if c.Identity == "next-b" && c.Gone {
					goneAfter = time.Since(cut)
				}
			}
		}
		t.Logf("shown gone %v after it was cut off", goneAfter)
		require.NotZero(t, goneAfter, "shown gone")
		assert.LessOrEqual(t, goneAfter, azlease.DefaultDuration+time.Second+100*time.Millisecond, "within a lease duration and storage's second")
		// Within the leader's poll, the next one is its standby.
		time.Sleep(6 * time.Second) // the default PollInterval (5 s) and its jitter
		cs = candidates()
		assert.Equal(t, []string{"lead-a", "last-c", "next-b"}, ids(cs), "a gone candidate last")
		assert.Equal(t, []string{"last-c"}, marked(cs))
		b := cs[2]
		assert.True(t, b.Gone)
		assert.False(t, b.Ready, "a gone candidate is not ready")
		assert.False(t, b.Standby, "nor a standby")
		require.NotNil(t, b.Refreshed)
		assert.WithinRange(t, *b.Refreshed, cut.Add(-azlease.DefaultDuration/3-2*time.Second), cut, "last seen before it was cut off")
	})
}

// sl is the name of the semaphore slot that was taken.
func sl(listed []azlease.Status) string {
	for _, st := range listed {
		if strings.HasPrefix(st.Name, "exports/slot-") {
			return st.Name
		}
	}
	return ""
}

// uiGet answers one request through the server's handler.
func uiGet(t *testing.T, s *uiServer, host, path string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Host = host
	rec := httptest.NewRecorder()
	s.srv.Handler.ServeHTTP(rec, r)
	b, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, string(b)
}

// newTestUIServer is a server on cc whose listings are list's, counted.
func newTestUIServer(cc *container.Client, list func() ([]azlease.Status, error), refresh time.Duration) (*uiServer, *atomic.Int32) {
	g := &globals{log: slog.New(slog.DiscardHandler)}
	s := newUIServer(context.Background(), g, cc, "", refresh, true)
	var n atomic.Int32
	s.list = func(context.Context) ([]azlease.Status, error) {
		n.Add(1)
		return list()
	}
	return s, &n
}

// TestUIServer: the JSON of every endpoint; an item by its page's path,
// and a missing one (404); every reader within --refresh shares one
// listing; a failing storage is a 503 carrying no items, why, and since
// when, then the data again when it answers; nothing in any answer is a
// lease ID or a SAS signature; only reads, only addressed to loopback.
func TestUIServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newUIWorld(t)
		defer w.close()
		cc := w.srv.Client("ui")
		var failing atomic.Value
		failing.Store(false)
		list := func() ([]azlease.Status, error) {
			if failing.Load().(bool) {
				_, err := azlease.InspectPrefix(context.Background(), w.srv.Client("down"), "")
				return nil, err
			}
			return azlease.InspectPrefix(context.Background(), cc, "")
		}
		s, lists := newTestUIServer(cc, list, 5*time.Second)
		const host = "127.0.0.1:8080"

		code, body := uiGet(t, s, host, "/api/overview")
		require.Equal(t, http.StatusOK, code, body)
		var ov uiOverview
		require.NoError(t, json.Unmarshal([]byte(body), &ov))
		assert.True(t, ov.Storage.OK)
		assert.Equal(t, 1, ov.Requests)
		assert.Len(t, ov.Items, 7)
		assert.Equal(t, 5.0, ov.RefreshSeconds)
		for _, it := range ov.Items {
			assert.Nil(t, it.Terms, "the overview has no detail")
			assert.Contains(t, body, `"queue": []`)
			assert.Contains(t, body, `"candidates": []`)
		}

		code, body = uiGet(t, s, host, "/api/items/leader/sched")
		require.Equal(t, http.StatusOK, code, body)
		var ia uiItemAnswer
		require.NoError(t, json.Unmarshal([]byte(body), &ia))
		require.NotNil(t, ia.Item)
		assert.Equal(t, "lead-a", ia.Item.Holder)
		assert.Len(t, ia.Item.Terms, 1)

		code, body = uiGet(t, s, host, "/api/items/shard-group/orders")
		require.Equal(t, http.StatusOK, code, body)
		require.NoError(t, json.Unmarshal([]byte(body), &ia))
		assert.Len(t, ia.Item.Group.Shards, 7)

		code, _ = uiGet(t, s, host, "/api/items/once-key/once/migrate-7")
		assert.Equal(t, http.StatusOK, code)
		code, _ = uiGet(t, s, host, "/api/items/mutex/sched")
		assert.Equal(t, http.StatusNotFound, code, "another kind")
		code, _ = uiGet(t, s, host, "/api/nothing")
		assert.Equal(t, http.StatusNotFound, code)

		code, body = uiGet(t, s, host, "/api/blobs")
		require.Equal(t, http.StatusOK, code)
		var ba uiBlobsAnswer
		require.NoError(t, json.Unmarshal([]byte(body), &ba))
		assert.Len(t, ba.BlobList, ba.Blobs-2, "every lock blob: the leader's candidacy and yield request blob are listed, and are not ones")

		for _, p := range []string{"/", "/items/leader/sched", "/ui/app.js", "/ui/style.css"} {
			code, body := uiGet(t, s, host, p)
			assert.Equal(t, http.StatusOK, code, p)
			assert.NotContains(t, body, "http://", p+": nothing from elsewhere")
		}
		assert.Equal(t, int32(1), lists.Load(), "one listing shared by every answer within --refresh")

		// Many readers at once, after the refresh: one listing.
		time.Sleep(5 * time.Second)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { uiGet(t, s, host, "/api/overview") })
		}
		wg.Wait()
		assert.Equal(t, int32(2), lists.Load())

		// Storage fails: no data, why, since when.
		time.Sleep(5 * time.Second)
		w.srv.Partition("down", azleasetest.Blackhole)
		failing.Store(true)
		code, body = uiGet(t, s, host, "/api/overview")
		assert.Equal(t, http.StatusServiceUnavailable, code)
		require.NoError(t, json.Unmarshal([]byte(body), &ov))
		assert.False(t, ov.Storage.OK)
		assert.Equal(t, "unreachable", ov.Storage.Problem)
		assert.NotEmpty(t, ov.Storage.Error)
		assert.NotNil(t, ov.Storage.FailingSince)
		assert.NotNil(t, ov.Storage.LastSuccess)
		assert.Empty(t, ov.Items, "no data from an older read")
		code, body = uiGet(t, s, host, "/api/items/leader/sched")
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.NotContains(t, body, "lead-a")

		// Refused.
		time.Sleep(5 * time.Second)
		w.srv.Heal("down")
		w.srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Client == "down" {
				return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusForbidden, Code: "AuthenticationFailed"}
			}
			return azleasetest.Fault{}
		})
		_, body = uiGet(t, s, host, "/api/overview")
		require.NoError(t, json.Unmarshal([]byte(body), &ov))
		assert.Equal(t, "refused", ov.Storage.Problem)
		assert.Contains(t, ov.Storage.Error, "check the account name and key")

		// Back.
		time.Sleep(5 * time.Second)
		failing.Store(false)
		code, body = uiGet(t, s, host, "/api/overview")
		assert.Equal(t, http.StatusOK, code)
		ov = uiOverview{}
		require.NoError(t, json.Unmarshal([]byte(body), &ov))
		assert.True(t, ov.Storage.OK, body)
		assert.Nil(t, ov.Storage.FailingSince)
		assert.Len(t, ov.Items, 7)

		// Nothing secret in any answer.
		paths := []string{"/api/overview", "/api/blobs"}
		for _, it := range ov.Items {
			paths = append(paths, "/api"+it.Path, it.Path)
		}
		for _, p := range paths {
			_, body := uiGet(t, s, host, p)
			for _, id := range w.leaseIDs {
				require.NotEmpty(t, id)
				assert.NotContains(t, strings.ToLower(body), strings.ToLower(id), p)
			}
			assert.NotContains(t, body, azleasetest.AccountKey, p)
			assert.NotContains(t, body, "not-for-the-page", p)
		}

		// Reads only; loopback only.
		r := httptest.NewRequest(http.MethodPost, "/api/overview", nil)
		r.Host = host
		rec := httptest.NewRecorder()
		s.srv.Handler.ServeHTTP(rec, r)
		assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
		for h, want := range map[string]int{
			"localhost:8080": 200, "[::1]:8080": 200, "127.0.0.5": 200, "evil.example:8080": 421, "192.168.1.9:8080": 421,
		} {
			code, _ := uiGet(t, s, h, "/api/overview")
			assert.Equal(t, want, code, h)
		}
		s.loopbackOnly = false
		code, _ = uiGet(t, s, "ui.example:8080", "/api/overview")
		assert.Equal(t, http.StatusOK, code, "served on a non-loopback address: any host")
	})
}

// TestUIRedact: a signature or key in an error's text never reaches the
// page.
func TestUIRedact(t *testing.T) {
	assert.Equal(t, "GET https://a.blob.core.windows.net/c?sv=1&sig=REDACTED&se=2: 403",
		redact("GET https://a.blob.core.windows.net/c?sv=1&sig=abc%2Fdef&se=2: 403"))
	assert.Equal(t, "AccountName=a;AccountKey=REDACTED;x", redact("AccountName=a;AccountKey=c2VjcmV0==;x"))
	assert.Equal(t, "SIG=REDACTED sig=REDACTED", redact("SIG=x sig=y"))
	assert.Equal(t, "http://127.0.0.1:10000/devstoreaccount1", accountOf("http://127.0.0.1:10000/devstoreaccount1/locks"))
	assert.Equal(t, "https://a.blob.core.windows.net", accountOf("https://a.blob.core.windows.net/locks?sv=1&sig=secret"))
}

// TestUIShardOrder: numbered shards in counting order, named ones after.
func TestUIShardOrder(t *testing.T) {
	names := []string{"b", "10", "2", "a", "0", "1"}
	slices.SortFunc(names, shardOrder)
	assert.Equal(t, []string{"0", "1", "2", "10", "a", "b"}, names)
}

// TestUITermsAndGaps: the timeline's data from a record: a planned stop
// ends exactly and leaves a certain gap of its length; an expiry ends at
// the bound the next holder recorded, with the part where the holder may
// have stopped (after its last renewal, which was after SeenHeld − the
// lease duration) and a gap that is uncertain; terms of an older azlease
// end at the next term's start with no gap; a term released now leaves an
// open gap.
func TestUITermsAndGaps(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hist := []azlease.HistoryEntry{
		{Holder: "d", Epoch: 14, Acquired: at(90_000), Began: azlease.ChangeExpired, EndedBy: azlease.ChangeReleased, Ended: at(95_000), LeaseDuration: 15 * time.Second},
		{Holder: "c", Epoch: 13, Acquired: at(40_000), Began: azlease.ChangeStop, EndedBy: azlease.ChangeExpired, Ended: at(89_990), SeenHeld: at(85_000), LeaseDuration: 15 * time.Second},
		{Holder: "b", Epoch: 12, Acquired: at(20_000), Began: azlease.ChangeUnknown, EndedBy: azlease.ChangeStop, Ended: at(39_880), LeaseDuration: 15 * time.Second},
		{Holder: "a", Epoch: 11, Acquired: at(0)},
	}
	st := azlease.Status{Exists: true, State: "available", Holder: "d", Epoch: 14, Acquired: at(90_000), Began: azlease.ChangeExpired,
		EndedBy: azlease.ChangeReleased, Ended: at(95_000), Released: true, History: hist}
	terms, gaps := terms(st)
	require.Len(t, terms, 4)
	a, b, c, d := terms[0], terms[1], terms[2], terms[3]

	assert.Equal(t, uiTime(at(20_000)), a.End, "an older azlease's term ends where the next began")
	assert.False(t, a.EndExact)
	assert.Nil(t, a.SureUntil)
	assert.Equal(t, "ended by the next term's start (how is not recorded)", a.Ended)

	assert.Equal(t, "stop", b.EndedBy)
	assert.True(t, b.EndExact)
	assert.Equal(t, uiTime(at(39_880)), b.End)
	assert.Equal(t, "19.9 s", b.Lasted)
	assert.Equal(t, "handed over (planned stop) at 10:00:39.880", b.Ended)

	assert.Equal(t, "stop", c.Began)
	assert.Equal(t, "handed over: the previous leader stopped (planned succession)", c.BeganText)
	assert.False(t, c.EndExact)
	assert.Equal(t, uiTime(at(89_990)), c.End)
	assert.Equal(t, uiTime(at(70_000)), c.SureUntil, "renewed after SeenHeld − 15 s")
	assert.Equal(t, "between 30.0 s and 50.0 s", c.Lasted)
	assert.Equal(t, "its lease expired at or before 10:01:29.990, after 10:01:25.000; last renewed at or before 10:01:14.990", c.Ended)

	assert.True(t, d.EndExact)
	assert.Equal(t, "released by its holder at 10:01:35.000", d.Ended)

	assert.Equal(t, []uiGap{
		{From: uiTime(at(39_880)), To: uiTime(at(40_000)), Text: "no holder for 120 ms (stop)"},
		{From: uiTime(at(70_000)), To: uiTime(at(90_000)), Uncertain: true, Text: "perhaps no working holder for up to 20.0 s (expired)"},
		{From: uiTime(at(95_000)), Text: "no holder since 10:01:35.000"},
	}, gaps)
}

// TestUIURLs: the URL 'azlease ui' prints opens the page: for an address
// of every interface (0.0.0.0, ::, none), whose own form (http://[::]:PORT/)
// opens nothing, the loopback one, with this host's other addresses named
// on stderr; any other address as it is.
func TestUIURLs(t *testing.T) {
	any6 := &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}
	hosts := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.1.2.3"), net.ParseIP("fe80::1"), net.ParseIP("fd00::5"), net.ParseIP("::1")}
	for _, c := range []struct {
		asked  string
		ln     net.Addr
		url    string
		others string
	}{
		{"0.0.0.0:8080", any6, "http://127.0.0.1:8080/", "from another machine, one of this host's addresses: http://10.1.2.3:8080/ http://[fd00::5]:8080/"},
		{":8080", any6, "http://127.0.0.1:8080/", "from another machine, one of this host's addresses: http://10.1.2.3:8080/ http://[fd00::5]:8080/"},
		{"[::]:8080", any6, "http://[::1]:8080/", "from another machine, one of this host's addresses: http://10.1.2.3:8080/ http://[fd00::5]:8080/"},
		{"127.0.0.1:8080", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}, "http://127.0.0.1:8080/", ""},
		{"10.1.2.3:0", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 4242}, "http://10.1.2.3:4242/", ""},
	} {
		url, others := uiURLs(c.asked, c.ln, hosts)
		assert.Equal(t, c.url, url, c.asked)
		assert.Equal(t, c.others, others, c.asked)
	}
	_, others := uiURLs("0.0.0.0:1", any6, nil)
	assert.Equal(t, "this host has no other address to name", others)
}
