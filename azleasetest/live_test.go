package azleasetest_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/internal/azurite"
	"github.com/azlease/azlease/internal/live"
)

// TestConformanceLive runs the conformance table on a real Azure Storage
// account, only when AZLEASE_TEST_CONNECTION_STRING or
// AZLEASE_TEST_ACCOUNT_URL is set (make live-azure; never in CI). It writes
// what Azure answered where Azurite differs, whether lease IDs come back in
// the case sent, and how long re-acquiring after an expiry takes to the file
// AZLEASE_LIVE_RESULTS names (bench/azure-live.md).
func TestConformanceLive(t *testing.T) {
	acct, ok := live.FromEnv()
	if !ok {
		t.Skip(live.Hint)
	}
	b, err := live.Open(acct)
	require.NoError(t, err)
	runLive(t, b, os.Getenv(live.EnvResults))
}

// TestConformanceLiveOnAzurite runs the live path itself against Azurite, as
// if Azurite's connection string were a live account's: the results file is
// written, and the throw-away container is gone afterwards.
func TestConformanceLiveOnAzurite(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: the live path waits for real lease expiries")
	}
	az := azurite.Require(t)
	b, err := live.Open(live.Account{ConnectionString: az.ConnectionString()})
	require.NoError(t, err)
	require.Equal(t, "azure", b.Name)
	results := filepath.Join(t.TempDir(), "azure-live.md")
	var name string
	t.Run("live", func(t *testing.T) { name = runLive(t, b, results) })
	require.False(t, t.Failed())

	md, err := os.ReadFile(results)
	require.NoError(t, err)
	for _, want := range []string{
		"## Where Azurite differs", "expired-foreign-ids", "non-guid-lease-id",
		"## Lease ID case", "## Re-acquiring after an expiry", "## Cases",
	} {
		require.Contains(t, string(md), want)
	}
	// Azurite's answers are recorded, not failed on: its non-GUID acquire
	// succeeds where Azure's documentation says 400.
	require.Contains(t, string(md), "| non-guid-lease-id | 0 `raw-acquire:not-a-guid:15` | InvalidHeaderValue | ok | ok | no |")
	require.NotContains(t, string(md), "failed")

	_, err = b.Client(t, name, nil).GetProperties(raw(context.Background()), nil)
	require.True(t, bloberror.HasCode(err, bloberror.ContainerNotFound), "the throw-away container %s was not deleted: %v", name, err)
}

// runLive runs the table and the probes on b in a throw-away container,
// writes the results to the file results (or the log when empty), and
// returns the container's name.
func runLive(t *testing.T, b *live.Backend, results string) string {
	name := b.ThrowAway(t)
	cc := b.Client(t, name, nil)
	missing := b.Client(t, live.NewName(), nil) // never created
	rec := &liveRecord{started: time.Now().UTC(), passed: map[string]bool{}}
	t.Run("cases", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				t.Cleanup(func() { rec.result(c.name, !t.Failed()) })
				runCase(t, cc, missing, c, false, rec)
			})
		}
		t.Run("probe-lease-id-returned", func(t *testing.T) {
			t.Parallel()
			t.Cleanup(func() { rec.result("probe-lease-id-returned", !t.Failed()) })
			probeIDCase(t, cc, rec)
		})
		for i := range reacquireSamples {
			n := fmt.Sprintf("probe-reacquire-%d", i+1)
			t.Run(n, func(t *testing.T) {
				t.Parallel()
				t.Cleanup(func() { rec.result(n, !t.Failed()) })
				probeReacquire(t, cc, n, rec)
			})
		}
	})
	md := rec.markdown(b)
	if results == "" {
		t.Log("\n" + md)
		return name
	}
	require.NoError(t, os.WriteFile(results, []byte(md), 0o644))
	t.Logf("results written to %s", results)
	return name
}

// Re-acquiring after an expiry: samples (in parallel, one blob each), the
// poll interval, and the bound.
const (
	reacquireSamples = 3
	reacquirePoll    = 250 * time.Millisecond
	reacquireBound   = 90 * time.Second
)

// probeIDCase acquires with a lease ID in upper case, then one in lower case,
// and records the ID each response carries.
func probeIDCase(t *testing.T, cc *container.Client, rec *liveRecord) {
	ctx := raw(context.Background())
	for i, sent := range []string{ids["a"], ids["A"]} {
		blobName := fmt.Sprintf("probe-id-case-%d", i)
		_, err := cc.NewBlockBlobClient(blobName).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), nil)
		require.NoError(t, err)
		lc, err := lease.NewBlobClient(cc.NewBlobClient(blobName), &lease.BlobClientOptions{LeaseID: to.Ptr(sent)})
		require.NoError(t, err)
		resp, err := lc.AcquireLease(ctx, 15, nil)
		require.NoError(t, err)
		require.NotNil(t, resp.LeaseID)
		require.True(t, strings.EqualFold(sent, *resp.LeaseID), "the lease ID returned is another GUID")
		rec.idCase(sent, *resp.LeaseID)
		_, err = lc.ReleaseLease(ctx, nil)
		require.NoError(t, err)
	}
}

// probeReacquire takes a 15 s lease and lets it expire; from the expiry
// instant (the acquire's response plus 15 s, the latest the service can have
// started the lease) another lease ID tries every 250 ms, up to 90 s.
func probeReacquire(t *testing.T, cc *container.Client, blobName string, rec *liveRecord) {
	ctx := raw(context.Background())
	_, err := cc.NewBlockBlobClient(blobName).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), nil)
	require.NoError(t, err)
	a, err := lease.NewBlobClient(cc.NewBlobClient(blobName), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["A"])})
	require.NoError(t, err)
	other, err := lease.NewBlobClient(cc.NewBlobClient(blobName), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["B"])})
	require.NoError(t, err)
	sent := time.Now()
	_, err = a.AcquireLease(ctx, 15, nil)
	require.NoError(t, err)
	expiry := time.Now().Add(15 * time.Second)
	s := reacquireSample{roundTrip: time.Since(sent)}
	time.Sleep(time.Until(expiry))
	for next := expiry; time.Since(expiry) < reacquireBound; next = next.Add(reacquirePoll) {
		time.Sleep(time.Until(next))
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := other.AcquireLease(actx, 15, nil)
		cancel()
		if err == nil {
			s.after = time.Since(expiry)
			s.ok = true
			break
		}
		if !bloberror.HasCode(err, bloberror.LeaseAlreadyPresent) {
			s.errors = append(s.errors, answer(err))
			continue
		}
		s.refused++
	}
	rec.reacquired(s)
	require.True(t, s.ok, "not re-acquired within %v of the expiry", reacquireBound)
}

type diffAnswer struct {
	caseName string
	index    int
	st       step
	got      string
}

type reacquireSample struct {
	roundTrip, after time.Duration
	refused          int
	errors           []string
	ok               bool
}

// liveRecord collects what the live run found, from parallel subtests.
type liveRecord struct {
	mu      sync.Mutex
	started time.Time
	diffs   []diffAnswer
	ids     [][2]string // sent, returned
	samples []reacquireSample
	passed  map[string]bool
}

func (r *liveRecord) answer(c string, i int, st step, got string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.diffs = append(r.diffs, diffAnswer{caseName: c, index: i, st: st, got: got})
}

func (r *liveRecord) idCase(sent, returned string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, [2]string{sent, returned})
}

func (r *liveRecord) reacquired(s reacquireSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
}

func (r *liveRecord) result(name string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passed[name] = ok
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// markdown renders the results file.
func (r *liveRecord) markdown(b *live.Backend) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w strings.Builder
	fmt.Fprintf(&w, "# azlease on a live Azure Storage account\n\n")
	fmt.Fprintf(&w, "Written by `make live-azure` (`TestConformanceLive` in `azleasetest/live_test.go`), started %s, "+
		"against %s (%s), in a throw-away container deleted afterwards.\n\n", r.started.Format(time.RFC3339), b.Host, b.How)

	fmt.Fprintf(&w, "## Where Azurite differs from Azure's documentation\n\n")
	fmt.Fprintf(&w, "These steps are recorded, not asserted; every other step of the conformance table asserts Azure's documented answer.\n\n")
	fmt.Fprintf(&w, "| case | step | Azure's documentation | Azurite | this account answered | as documented |\n|---|---|---|---|---|---|\n")
	order := map[string]int{}
	for i, c := range cases {
		order[c.name] = i
	}
	sort.Slice(r.diffs, func(i, j int) bool {
		a, b := r.diffs[i], r.diffs[j]
		if order[a.caseName] != order[b.caseName] {
			return order[a.caseName] < order[b.caseName]
		}
		return a.index < b.index
	})
	for _, d := range r.diffs {
		fmt.Fprintf(&w, "| %s | %d `%s` | %s | %s | %s | %s |\n", d.caseName, d.index, d.st.op, d.st.want, d.st.azurite, d.got, yesNo(d.got == d.st.want))
	}
	if n := countDifferences(); len(r.diffs) != n {
		fmt.Fprintf(&w, "\n%d of the table's %d such steps were reached (a case that failed earlier stops).\n", len(r.diffs), n)
	}

	fmt.Fprintf(&w, "\n## Lease ID case\n\nThe lease ID in the response to an acquire, compared with the proposed one.\n\n")
	fmt.Fprintf(&w, "| sent | returned | same case as sent |\n|---|---|---|\n")
	sort.Slice(r.ids, func(i, j int) bool { return r.ids[i][0] < r.ids[j][0] })
	for _, p := range r.ids {
		fmt.Fprintf(&w, "| `%s` | `%s` | %s |\n", p[0], p[1], yesNo(p[0] == p[1]))
	}

	fmt.Fprintf(&w, "\n## Re-acquiring after an expiry\n\n")
	fmt.Fprintf(&w, "A 15 s lease is left to expire; from the expiry instant (the acquire's response + 15 s) another lease ID "+
		"tries to acquire every %v, up to %v. Time is to the successful acquire's response.\n\n", reacquirePoll, reacquireBound)
	fmt.Fprintf(&w, "| sample | acquire round trip | refused tries | other errors | re-acquired after the expiry instant |\n|---|---|---|---|---|\n")
	for i, s := range r.samples {
		got := "not within " + reacquireBound.String()
		if s.ok {
			got = ms(s.after)
		}
		errs := "none"
		if len(s.errors) > 0 {
			errs = strings.Join(s.errors, ", ")
		}
		fmt.Fprintf(&w, "| %d | %s | %d | %s | %s |\n", i+1, ms(s.roundTrip), s.refused, errs, got)
	}

	fmt.Fprintf(&w, "\n## Cases\n\n| case | result |\n|---|---|\n")
	names := make([]string, 0, len(r.passed))
	for n := range r.passed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		res := "passed"
		if !r.passed[n] {
			res = "failed (see the test output)"
		}
		fmt.Fprintf(&w, "| %s | %s |\n", n, res)
	}
	return w.String()
}

func countDifferences() int {
	n := 0
	for _, c := range cases {
		for _, st := range c.steps {
			if st.azurite != "" {
				n++
			}
		}
	}
	return n
}
